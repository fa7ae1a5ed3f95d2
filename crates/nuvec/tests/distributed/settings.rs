//! Forming groups: from MLX's launch environment, from addresses in code, under mlx.launch,
//! and the refusals of settings that are wrong.

use super::*;

#[test]
fn init_refuses_an_unknown_choice_of_stores() {
    init_refuses(test_name!(), ("NUVEC_RING_STREAMING_STORES", "always"));
}

#[test]
fn init_refuses_an_unknown_shared_memory_choice() {
    init_refuses(test_name!(), ("NUVEC_RING_SHARED_MEMORY", "maybe"));
}

#[test]
fn init_without_environment_is_a_group_of_one_or_a_clear_error() {
    if nuvec_test_support::ranks::is_child() {
        return;
    }
    // This process has no launch environment (tests never set it on themselves).
    assert!(std::env::var_os("MLX_HOSTFILE").is_none());
    let group = distributed::init(false).unwrap();
    assert_eq!((group.rank(), group.size()), (0, 1));
    let error = distributed::init(true).unwrap_err().to_string();
    assert!(
        error.contains("MLX_HOSTFILE") && error.contains("MLX_RANK"),
        "{error}"
    );
    assert!(distributed::is_available(distributed::Backend::Ring));
    if std::env::var_os("NUVEC_REQUIRE_VERBS").is_some() {
        // The tests build JACCL, and CI installs the verbs library it loads.
        assert!(distributed::is_available(distributed::Backend::Jaccl));
    }
    let jaccl = distributed::init_backend(true, distributed::Backend::Jaccl)
        .unwrap_err()
        .to_string();
    assert!(
        jaccl.contains("jaccl")
            && jaccl.contains("MLX_IBV_DEVICES")
            && jaccl.contains("nuvec launch --backend jaccl"),
        "{jaccl}"
    );
    assert_eq!(
        distributed::init_backend(false, distributed::Backend::Jaccl)
            .unwrap()
            .size(),
        1,
        "not strict: the group of this process alone"
    );
}

#[test]
fn init_with_forms_a_group_from_addresses_in_code() {
    let ports = nuvec_test_support::ranks::free_ports(2);
    let nodes: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let options = distributed::Options::with_timeout(Duration::from_secs(20));
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let (nodes, options) = (nodes.clone(), options.clone());
            std::thread::spawn(move || {
                let group =
                    distributed::init_with(&nodes, rank, &options).expect("forming the group");
                // Nobody can close before the all_sum below, so the probe sees open peers.
                group.health().expect("a freshly formed group is healthy");
                let total = distributed::all_sum(&array![1.0, 2.0], Some(&group))
                    .to_vec::<f32>()
                    .unwrap();
                group.close();
                let closed = distributed::all_sum(&array![1.0], Some(&group))
                    .check()
                    .unwrap_err()
                    .to_string();
                (total, closed)
            })
        })
        .collect();
    for handle in handles {
        let (total, closed) = handle.join().expect("rank thread");
        assert_eq!(total, [2.0, 4.0]);
        assert!(closed.contains("closed"), "{closed}");
    }
}

#[test]
fn the_hello_distributed_example_runs_on_4_ranks() {
    let example = nuvec_test_support::ranks::example("hello_distributed");
    let ports = nuvec_test_support::ranks::free_ports(4);
    let hostfile = nuvec_test_support::ranks::write_hostfile(&ports);
    let children: Vec<_> = (0..4)
        .map(|rank| {
            let mut command = std::process::Command::new(&example);
            command
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .env("NUVEC_DISTRIBUTED_TIMEOUT", "30");
            std::thread::spawn(move || command.output())
        })
        .collect();
    for (rank, child) in children.into_iter().enumerate() {
        let output = child
            .join()
            .expect("rank thread")
            .expect("running the example");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "rank {rank}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains(&format!("rank {rank} of 4")), "{stdout}");
    }
    let _ = std::fs::remove_file(hostfile);
}

/// MLX's own launcher, from `NUVEC_MLX_LAUNCH` or the workspace's `.venv-mlx` (which
/// `cargo xtask golden` and CI create with `pip install "mlx[cpu]==0.32.4"`).
fn mlx_launch() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("NUVEC_MLX_LAUNCH") {
        return Some(path.into());
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv-mlx/bin/mlx.launch");
    venv.exists().then_some(venv)
}

#[test]
fn programs_started_by_mlx_launch_form_a_group() {
    let Some(launcher) = mlx_launch() else {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
            "NUVEC_REQUIRE_MLX_LAUNCH is set but mlx.launch was not found"
        );
        eprintln!("skipped: mlx.launch not found (pip install \"mlx[cpu]==0.32.4\" into .venv-mlx, or set NUVEC_MLX_LAUNCH)");
        return;
    };
    let example = nuvec_test_support::ranks::example("hello_distributed");
    for ranks in [2, 4] {
        let output = std::process::Command::new(&launcher)
            .args(["--backend", "ring", "-n", &ranks.to_string(), "--"])
            .arg(&example)
            .env("NUVEC_DISTRIBUTED_TIMEOUT", "30")
            .output()
            .expect("running mlx.launch");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        for rank in 0..ranks {
            let line = format!(
                "rank {rank} of {ranks}: all_sum = array([{ranks}, {}, {}], dtype=float32)",
                2 * ranks,
                3 * ranks
            );
            assert!(
                stdout.contains(&line),
                "mlx.launch -n {ranks}: no {line:?} in\n{stdout}\n{stderr}"
            );
        }
    }
}

#[test]
fn init_refuses_an_unknown_read_polling_mode() {
    init_refuses(test_name!(), ("NUVEC_RING_POLL", "busy"));
}

/// `init` with `variable` set to the unknown `value` fails on every rank of 2, naming both.
fn init_refuses(test: &str, (variable, value): (&str, &str)) {
    let launch = Launch {
        env: vec![(variable.into(), value.into())],
        ..Default::default()
    };
    launch_ranks(test, 2, TIMEOUT, &launch, |group| {
        let error = group.unwrap_err().to_string();
        assert!(
            error.contains(variable) && error.contains(&format!("{value:?}")),
            "{error}"
        );
    });
}
