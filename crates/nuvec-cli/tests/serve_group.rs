//! `nuvec serve` on 2 ranks under `nuvec launch`: rank 0 serves, the model is split over the
//! group, and the answers are one process's; a rank killed mid-request makes the server
//! answer 503 with the reason, and /health says so, within the timeout.

mod serve_support;

use serde_json::{json, Value};
use serve_support::{chat, generate, streamed_text, Server};
use std::time::{Duration, Instant};

const MODEL: &str = "qwen3-f32";

#[test]
fn two_ranks_answer_as_one_process_and_a_killed_rank_gives_503_within_the_timeout() {
    let timeout = [("NUVEC_DISTRIBUTED_TIMEOUT", "5")];
    let server = Server::start(MODEL, 2, &[], &timeout);
    assert_eq!(server.health().1["ranks"], 2);
    let expected = generate(
        MODEL,
        &[
            "--prompt",
            "hello there",
            "--max-tokens",
            "12",
            "--temp",
            "0.8",
            "--seed",
            "3",
        ],
    );
    let body = chat(
        "hello there",
        json!({"max_tokens": 12, "temperature": 0.8, "seed": 3}),
    );
    let (status, answer) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{answer}\n{}", server.log());
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        expected.as_str()
    );
    // Several at once, batched on both ranks.
    let bodies: Vec<Value> = (0..6)
        .map(|i| {
            chat(
                &format!("number {i}"),
                json!({"max_tokens": 6 + i, "seed": i, "temperature": 0.5, "stream": true}),
            )
        })
        .collect();
    let alone: Vec<String> = (bodies.iter())
        .map(|b| streamed_text(&server.stream("/v1/chat/completions", b).1))
        .collect();
    let together: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (bodies.iter())
            .map(|b| scope.spawn(|| streamed_text(&server.stream("/v1/chat/completions", b).1)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(together, alone);

    // A request that would run for long; rank 1 is killed while it does.
    let endless = chat(
        "go on",
        json!({"max_tokens": 100000, "logit_bias": {"393": -100, "395": -100}}),
    );
    let rank_1 = server.rank_pid(1).expect("rank 1's pid");
    let started = Instant::now();
    let (status, answer) = std::thread::scope(|scope| {
        let request = scope.spawn(|| server.post("/v1/chat/completions", &endless));
        while server.health().1["active_requests"] != 1 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the request never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill signals a process this test started; no memory is touched.
        unsafe { libc::kill(rank_1, libc::SIGKILL) };
        request.join().unwrap()
    });
    assert_eq!(status, 503, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    let reason = answer["error"]["message"].as_str().unwrap();
    eprintln!("503 reason: {reason}");
    assert!(
        reason.contains("rank 1"),
        "the reason names the rank: {reason}"
    );
    let (status, health) = server.health();
    assert_eq!(status, 503);
    assert_eq!(health["status"], "unavailable");
    assert!(
        health["reason"].as_str().unwrap().contains("rank 1"),
        "{health}"
    );
    let (status, _) = server.post(
        "/v1/chat/completions",
        &chat("again", json!({"max_tokens": 2})),
    );
    assert_eq!(status, 503);
}

#[test]
fn two_pipeline_stages_answer_as_one_process_alone_and_batched() {
    let server = Server::start(MODEL, 2, &["--pipeline"], &[]);
    let bodies: Vec<(Value, String)> = (0..4)
        .map(|i| {
            let prompt = format!("stage question {i}");
            let (tokens, seed) = ((6 + i).to_string(), i.to_string());
            let args = [
                "--prompt",
                &prompt,
                "--max-tokens",
                &tokens,
                "--temp",
                "0.6",
                "--seed",
                &seed,
            ];
            let expected = generate(MODEL, &args);
            let body = json!({"max_tokens": 6 + i, "temperature": 0.6, "seed": i, "stream": true});
            (chat(&prompt, body), expected)
        })
        .collect();
    for (body, expected) in &bodies {
        let (status, events) = server.stream("/v1/chat/completions", body);
        assert_eq!(status, 200, "{}", server.log());
        assert_eq!(streamed_text(&events), *expected);
    }
    let together: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (bodies.iter())
            .map(|(b, _)| {
                scope.spawn(|| streamed_text(&server.stream("/v1/chat/completions", b).1))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let expected: Vec<String> = bodies.into_iter().map(|(_, e)| e).collect();
    assert_eq!(together, expected);
}

#[test]
fn a_stalled_rank_is_reported_on_health_within_the_timeout_even_when_idle() {
    let server = Server::start(MODEL, 2, &[], &[("NUVEC_DISTRIBUTED_TIMEOUT", "3")]);
    let (status, _) = server.post(
        "/v1/chat/completions",
        &chat("warm", json!({"max_tokens": 2})),
    );
    assert_eq!(status, 200, "{}", server.log());
    let rank_1 = server.rank_pid(1).expect("rank 1's pid");
    // SAFETY: kill signals a process this test started; no memory is touched.
    unsafe { libc::kill(rank_1, libc::SIGSTOP) };
    let started = Instant::now();
    let health = loop {
        let (status, health) = server.health();
        if status == 503 {
            break health;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still healthy: {health}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: as above; the stopped rank is let go so the launcher can end it.
    unsafe { libc::kill(rank_1, libc::SIGCONT) };
    let reason = health["reason"].as_str().unwrap();
    assert!(reason.contains("rank 1"), "{reason}");
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &chat("again", json!({"max_tokens": 2})),
    );
    assert_eq!(status, 503);
    assert_eq!(answer["error"]["message"], reason);
}
