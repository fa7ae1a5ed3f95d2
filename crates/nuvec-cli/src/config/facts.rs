//! What `nuvec config` learns from each host before deciding anything, in one ssh call per
//! host, all hosts at once: that ssh works, the platform, nuvec's version there, the clock,
//! password-less sudo, and whether the pre-shared key is set (never its value).

use super::remote::{quote, Remote};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A network interface and its IPv4 networks.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Interface {
    pub(crate) name: String,
    pub(crate) up: bool,
    /// Addresses with their prefix lengths.
    pub(crate) addresses: Vec<(Ipv4Addr, u8)>,
}

/// The operating system a host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Platform {
    MacOs,
    Linux,
}

/// One host's answers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostFacts {
    pub(crate) platform: Platform,
    /// The first line `nuvec --version` printed there.
    pub(crate) version: Option<String>,
    /// The host's clock minus this machine's, in seconds (the round trip halved).
    pub(crate) clock_offset_s: f64,
    pub(crate) sudo: bool,
    pub(crate) key_set: bool,
}

/// The one script each host runs.
fn script(nuvec: &str) -> String {
    format!(
        "echo platform=$(uname -s); echo clock=$(date +%s.%N); \
         echo version=$({} --version 2>/dev/null | head -n 1); \
         if sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi; \
         if [ -n \"${{NUVEC_DISTRIBUTED_KEY:-}}\" ]; then echo key=set; else echo key=unset; fi",
        quote(nuvec)
    )
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Parses the script's answer; `sent` and `received` bracket the call on this machine's clock.
pub(crate) fn parse_answer(
    host: &str,
    text: &str,
    sent: f64,
    received: f64,
) -> Result<HostFacts, String> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::trim)
    };
    let platform = match field("platform") {
        Some("Darwin") => Platform::MacOs,
        Some("Linux") => Platform::Linux,
        other => {
            return Err(format!(
                "{host}: runs {:?}; nuvec config knows macOS and Linux hosts",
                other.unwrap_or("an unknown system")
            ))
        }
    };
    // macOS's date has no %N and prints it as is: whole seconds then.
    let clock = field("clock")
        .and_then(|c| {
            c.parse::<f64>()
                .ok()
                .or_else(|| c.split('.').next()?.parse().ok())
        })
        .ok_or_else(|| format!("{host}: `date +%s` printed no time"))?;
    Ok(HostFacts {
        platform,
        version: field("version")
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        clock_offset_s: clock - (sent + received) / 2.0,
        sudo: field("sudo") == Some("yes"),
        key_set: field("key") == Some("set"),
    })
}

/// Every host's facts, gathered in parallel: per host, its facts or why they could not be had.
pub(crate) fn gather(
    remote: &Remote,
    hosts: &[String],
    nuvec: &str,
) -> Vec<Result<HostFacts, String>> {
    let script = script(nuvec);
    std::thread::scope(|scope| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|host| {
                let script = &script;
                scope.spawn(move || {
                    let sent = now_s();
                    let done =
                        remote.run(host, script, Duration::from_secs(20), "checking ssh access")?;
                    let received = now_s();
                    if !done.success() {
                        return Err(format!(
                            "{host} (checking ssh access): the check failed: {}",
                            done.reason()
                        ));
                    }
                    parse_answer(host, &done.stdout, sent, received)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a check panicked".into())))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_give_platform_version_clock_sudo_and_key_presence() {
        let text = "platform=Linux\nclock=1000.5\nversion=nuvec 0.1.0\nsudo=no\nkey=set\n";
        let facts = parse_answer("n1", text, 998.0, 999.0).unwrap();
        assert_eq!(facts.platform, Platform::Linux);
        assert_eq!(facts.version.as_deref(), Some("nuvec 0.1.0"));
        assert_eq!(facts.clock_offset_s, 2.0);
        assert!(!facts.sudo && facts.key_set);
        let mac = "platform=Darwin\nclock=1000.N\nversion=\nsudo=yes\nkey=unset\n";
        let facts = parse_answer("m1", mac, 1000.0, 1000.0).unwrap();
        assert_eq!(
            (facts.platform, facts.clock_offset_s),
            (Platform::MacOs, 0.0)
        );
        assert!(facts.version.is_none() && facts.sudo && !facts.key_set);
        let error = parse_answer("w1", "platform=MINGW64_NT\n", 0.0, 0.0).unwrap_err();
        assert!(error.starts_with("w1: runs \"MINGW64_NT\""), "{error}");
    }

    #[test]
    fn this_machine_answers_its_own_check() {
        let remote = Remote {
            ssh: vec!["ssh".into()],
            verbose: false,
        };
        let facts = gather(&remote, &["127.0.0.1".into()], "/nonexistent/nuvec");
        let facts = facts[0].as_ref().unwrap();
        assert!(facts.version.is_none());
        assert!(facts.clock_offset_s.abs() < 5.0, "{}", facts.clock_offset_s);
    }
}
