//! Throwaway ssh servers for tests that reach "hosts" through ssh: Debian's sshd with keys made
//! for the test, listening on a chosen address (optionally inside a network namespace), and an
//! ssh client config naming each server. Needs root and openssh-server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a command, its stderr as the error.
pub fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A folder of keys and configs, and the servers started from it; all removed on drop.
#[derive(Debug)]
pub struct SshServers {
    /// The folder (keys, configs, anything the test adds).
    pub dir: PathBuf,
    servers: Vec<Child>,
    client_config: String,
}

impl Drop for SshServers {
    fn drop(&mut self) {
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl SshServers {
    /// A fresh folder with a host key and a client key the servers accept.
    pub fn new(tag: &str) -> Result<SshServers, String> {
        if !Path::new("/usr/sbin/sshd").exists() {
            return Err("/usr/sbin/sshd is missing (apt-get install openssh-server)".into());
        }
        let dir = std::env::temp_dir().join(format!("nuvec-sshd-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let servers = SshServers {
            dir,
            servers: Vec::new(),
            client_config: String::new(),
        };
        for key in ["host_key", "client_key"] {
            run(
                "ssh-keygen",
                &["-q", "-t", "ed25519", "-N", "", "-f", &servers.path(key)],
            )?;
        }
        std::fs::copy(
            servers.path("client_key.pub"),
            servers.path("authorized_keys"),
        )
        .map_err(|e| e.to_string())?;
        let _ = std::fs::create_dir_all("/run/sshd");
        Ok(servers)
    }

    /// A file's path in the folder.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// The ssh client config naming every server started so far.
    pub fn client_config(&self) -> String {
        self.path("ssh_config")
    }

    /// Starts a server on `address:port` (inside network namespace `netns` if given), with
    /// `extra` lines for its config, and names it `alias` in the client config; returns once
    /// it accepts a login.
    pub fn start(
        &mut self,
        alias: &str,
        address: &str,
        port: u16,
        netns: Option<&str>,
        extra: &str,
    ) -> Result<(), String> {
        let config = self.path(&format!("sshd_config_{alias}"));
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress {address}\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
                 StrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\n{extra}",
                self.path("host_key"),
                self.path(&format!("sshd_{alias}.pid")),
                self.path("authorized_keys")
            ),
        )
        .map_err(|e| e.to_string())?;
        let user = String::from_utf8_lossy(
            &Command::new("id")
                .arg("-un")
                .output()
                .map_err(|e| e.to_string())?
                .stdout,
        )
        .trim()
        .to_string();
        self.client_config.push_str(&format!(
            "Host {alias}\n  HostName {address}\n  Port {port}\n  User {user}\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             LogLevel ERROR\n",
            self.path("client_key")
        ));
        std::fs::write(self.client_config(), &self.client_config).map_err(|e| e.to_string())?;
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "/usr/sbin/sshd"]);
                c
            }
            None => Command::new("/usr/sbin/sshd"),
        };
        let child = command
            .args(["-D", "-e", "-f", &config])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting sshd: {e}"))?;
        self.servers.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let probe = Command::new("ssh")
                .args([
                    "-F",
                    &self.client_config(),
                    "-o",
                    "BatchMode=yes",
                    alias,
                    "true",
                ])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running ssh: {e}"))?;
            if probe.status.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "sshd for {alias} did not accept us: {}",
                    String::from_utf8_lossy(&probe.stderr)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
