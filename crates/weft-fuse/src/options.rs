//! Mount options (`-o a,b=c`): weftfs's own, the kernel's, and the fstab words `mount(8)`
//! passes along that mean nothing here.

use std::time::Duration;

/// How a mount behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct MountOptions {
    /// How long the kernel may trust a name it looked up (`entry_timeout=SECS`).
    pub entry_timeout: Duration,
    /// How long the kernel may trust attributes (`attr_timeout=SECS`).
    pub attr_timeout: Duration,
    /// The kernel's writeback cache (`writeback_cache`): off by default, since it assumes
    /// that one kernel sees every change of a file.
    pub writeback_cache: bool,
    /// Open files with `FOPEN_DIRECT_IO` and parallel direct writes (`direct_io`): no
    /// kernel page cache, and writers of disjoint ranges of one file run in parallel.
    pub direct_io: bool,
    /// Threads reading kernel requests (`threads=N`); each only hands requests to the
    /// async client, so a few suffice for many requests in flight.
    pub threads: usize,
    /// How long the thread reading kernel requests keeps trying for the next one after a
    /// request before it sleeps (`poll_us=N`, microseconds; 0: every thread sleeps in
    /// `read(2)`). A caller that makes one call after another then gets each taken without
    /// a wake-up; the threads take turns at reading (see the vendored fuser's `reader.rs`).
    pub poll: Duration,
    /// Kernel permission checks on cached attributes (`default_permissions`, on by
    /// default; `nodefault_permissions` leaves every check to the MDT).
    pub default_permissions: bool,
    /// Serve every local user (`allow_other`); on by default for a mount made by root.
    pub allow_other: Option<bool>,
    /// Read-only mount (`ro`).
    pub read_only: bool,
    /// Pending background requests the kernel may queue (`max_background=N`).
    pub max_background: u16,
    /// Kernel mount flags passed through (`dev`, `suid`, `noexec`, `noatime`, ...).
    pub kernel_flags: Vec<String>,
    /// Where job ids come from (`jobid_var=NAME`, see [`crate::jobid`]); unset: the MGS's
    /// stored `jobid_var`, else `SLURM_JOB_ID`.
    pub jobid_var: Option<String>,
    /// The fallback job id format (`jobid_name=FORMAT`); unset: the MGS's stored
    /// `jobid_name`, else `%e.%u`.
    pub jobid_name: Option<String>,
    /// Whether requests come through FUSE-over-io_uring queues (`uring=auto|on|off`):
    /// `auto` (the default) uses them when the kernel offers them (Linux 6.14+ with the
    /// fuse module parameter `enable_uring=Y`) and falls back to `/dev/fuse`; `on` fails
    /// the mount without them; `off` reads `/dev/fuse`. See the vendored fuser's `uring.rs`.
    pub uring: fuser::UringMode,
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            writeback_cache: false,
            direct_io: false,
            threads: 4,
            poll: Duration::from_micros(50),
            default_permissions: true,
            allow_other: None,
            read_only: false,
            max_background: 64,
            kernel_flags: Vec::new(),
            jobid_var: None,
            jobid_name: None,
            uring: fuser::UringMode::Auto,
        }
    }
}

/// Longest `poll_us`: past a millisecond a sleeping reader wakes up sooner than it gains.
const MAX_POLL_US: u64 = 1000;

/// Words of fstab and `mount(8)` that concern the mount command, not the file system.
fn ignored(word: &str) -> bool {
    matches!(
        word,
        "defaults"
            | "auto"
            | "noauto"
            | "nofail"
            | "_netdev"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "rw"
            | "async"
            | "relatime"
            | "norelatime"
    ) || word.starts_with("x-")
        || word.starts_with("comment=")
}

fn seconds(key: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = v
        .parse()
        .map_err(|_| format!("{key}={v}: not a number of seconds"))?;
    if !(0.0..=86_400.0).contains(&s) {
        return Err(format!("{key}={v}: out of range 0..86400"));
    }
    Ok(Duration::from_secs_f64(s))
}

impl MountOptions {
    /// Applies a comma-separated option list (one `-o` argument).
    pub fn apply(&mut self, list: &str) -> Result<(), String> {
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let (key, value) = match word.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (word, None),
            };
            match (key, value) {
                ("entry_timeout", Some(v)) => self.entry_timeout = seconds(key, v)?,
                ("attr_timeout", Some(v)) => self.attr_timeout = seconds(key, v)?,
                ("writeback_cache", None) => self.writeback_cache = true,
                ("nowriteback_cache", None) => self.writeback_cache = false,
                ("direct_io", None) => self.direct_io = true,
                ("default_permissions", None) => self.default_permissions = true,
                ("nodefault_permissions", None) => self.default_permissions = false,
                ("allow_other", None) => self.allow_other = Some(true),
                ("noallow_other", None) => self.allow_other = Some(false),
                ("ro", None) => self.read_only = true,
                ("jobid_var", Some(v)) if !v.is_empty() => self.jobid_var = Some(v.to_string()),
                ("jobid_name", Some(v)) if !v.is_empty() => self.jobid_name = Some(v.to_string()),
                ("threads", Some(v)) => {
                    self.threads = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=256).contains(n))
                        .ok_or_else(|| format!("threads={v}: not in 1..256"))?
                }
                ("poll_us", Some(v)) => {
                    self.poll = v
                        .parse()
                        .ok()
                        .filter(|&n| n <= MAX_POLL_US)
                        .map(Duration::from_micros)
                        .ok_or_else(|| format!("poll_us={v}: not in 0..{MAX_POLL_US}"))?
                }
                ("uring", Some(v)) => {
                    self.uring = match v {
                        "auto" => fuser::UringMode::Auto,
                        "on" => fuser::UringMode::On,
                        "off" => fuser::UringMode::Off,
                        _ => return Err(format!("uring={v}: not auto, on or off")),
                    }
                }
                ("max_background", Some(v)) => {
                    self.max_background = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("max_background={v}: not in 1..65535"))?
                }
                (
                    "dev" | "nodev" | "suid" | "nosuid" | "exec" | "noexec" | "atime" | "noatime"
                    | "sync" | "dirsync",
                    None,
                ) => self.kernel_flags.push(key.to_string()),
                _ if ignored(word) => {}
                _ => return Err(format!("unknown mount option '{word}'")),
            }
        }
        Ok(())
    }

    /// Parses one `-o` list from the defaults.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut o = Self::default();
        o.apply(list)?;
        Ok(o)
    }
}

/// Splits `HOST:PORT:/FSNAME` into the MGS address and the file system name.
pub fn parse_source(source: &str) -> Result<(String, String), String> {
    let (addr, fsname) = source
        .rsplit_once(":/")
        .ok_or_else(|| format!("'{source}' is not HOST:PORT:/FSNAME"))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("'{source}' has no port"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("'{source}' is not HOST:PORT:/FSNAME"));
    }
    if fsname.is_empty() || fsname.contains('/') {
        return Err(format!("'{source}' has no valid file system name"));
    }
    Ok((addr.to_string(), fsname.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_unknown_ones_are_refused() {
        let o = MountOptions::parse("defaults,_netdev,attr_timeout=0.5,writeback_cache,noatime")
            .unwrap_or_default();
        assert_eq!(o.attr_timeout, Duration::from_millis(500));
        assert!(o.writeback_cache);
        assert_eq!(o.kernel_flags, vec!["noatime".to_string()]);
        assert!(MountOptions::parse("frobnicate").is_err());
        assert!(MountOptions::parse("threads=0").is_err());
        assert_eq!(MountOptions::default().poll, Duration::from_micros(50));
        let o = MountOptions::parse("poll_us=0").unwrap_or_default();
        assert_eq!(o.poll, Duration::ZERO);
        assert!(MountOptions::parse("poll_us=1001").is_err());
        assert!(MountOptions::parse("poll_us=x").is_err());
        assert!(MountOptions::parse("entry_timeout=-1").is_err());
    }

    #[test]
    fn uring_option() {
        use fuser::UringMode;
        assert_eq!(MountOptions::default().uring, UringMode::Auto);
        let mode = |l: &str| MountOptions::parse(l).map(|o| o.uring);
        assert_eq!(mode("uring=on"), Ok(UringMode::On));
        assert_eq!(mode("uring=off"), Ok(UringMode::Off));
        assert_eq!(mode("uring=auto"), Ok(UringMode::Auto));
        assert_eq!(mode("uring=off,uring=auto"), Ok(UringMode::Auto));
        assert!(mode("uring=yes").is_err());
        assert!(mode("uring").is_err());
        assert!(mode("uring=").is_err());
    }

    #[test]
    fn sources_parse() {
        assert_eq!(
            parse_source("127.0.0.1:9400:/weft"),
            Ok(("127.0.0.1:9400".into(), "weft".into()))
        );
        assert_eq!(
            parse_source("mgs.example:1:/fs"),
            Ok(("mgs.example:1".into(), "fs".into()))
        );
        assert!(parse_source("127.0.0.1:/weft").is_err());
        assert!(parse_source("127.0.0.1:9400:/").is_err());
        assert!(parse_source("127.0.0.1:9400").is_err());
    }
}
