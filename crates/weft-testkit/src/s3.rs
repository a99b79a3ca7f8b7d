//! Real S3-compatible servers for tests of data repositories: `s3s-fs` (a Rust server
//! keeping objects as files, checking signatures), served in the test process with fault
//! injection ([`crate::s3_faults`]), and moto (Python, AWS's behaviour, signatures not
//! checked), a process of its own; both on 127.0.0.1, stopped on drop.
//!
//! moto's program is found on `PATH`, in cargo's bin directories, then under the
//! workspace's `target/test-tools` (where `test.sh` installs it); a missing program
//! fails the test with the command that installs it (tests never skip).

use crate::s3_faults::{Faults, InProcess};
use crate::{ServerProcess, free_port};
use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_proto::hsm::{RepoPolicy, RepoSpec};

/// The access key every test server accepts (and [`S3Server::env`] gives).
pub const ACCESS_KEY: &str = "weft-test-access";
/// The secret key every test server accepts.
pub const SECRET_KEY: &str = "weft-test-secret-0123456789";
/// The region the servers are addressed in.
pub const REGION: &str = "us-east-1";
/// How long a server may take to answer after it starts (moto imports for seconds).
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// Which server an [`S3Server`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Kind {
    /// `s3s-fs` (in this process, with fault injection): buckets are directories under
    /// its root.
    S3sFs,
    /// moto's server mode.
    Moto,
}

/// How a server runs.
enum Backend {
    Process(ServerProcess),
    InProcess(InProcess),
}

/// One S3-compatible server.
pub struct S3Server {
    kind: S3Kind,
    port: u16,
    backend: Backend,
    /// The server's data (s3s-fs's root) and its log.
    dir: tempfile::TempDir,
    /// How long the server took to answer after it was started.
    started_in: Duration,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("kind", &self.kind)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl S3Server {
    /// Starts `s3s-fs` in this process on a free port with [`ACCESS_KEY`] and
    /// [`SECRET_KEY`], with no fault yet (see [`S3Server::faults`]).
    pub fn start_s3s_fs() -> Result<Self> {
        let started = Instant::now();
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root)?;
        let server = InProcess::start(&root, 0, ACCESS_KEY, SECRET_KEY)?;
        Ok(Self {
            kind: S3Kind::S3sFs,
            port: server.port(),
            backend: Backend::InProcess(server),
            dir,
            started_in: started.elapsed(),
        })
    }

    /// Starts moto's server on a free port and waits until it answers.
    pub fn start_moto() -> Result<Self> {
        let bin = find_program(
            "moto_server",
            "./test.sh (it installs the test tools), or `python3 -m venv target/test-tools/venv \
             && target/test-tools/venv/bin/pip install 'moto[server]'`",
        )?;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let args = vec![
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ];
        Self::start(S3Kind::Moto, &bin, args, dir, port)
    }

    fn start(
        kind: S3Kind,
        bin: &Path,
        args: Vec<String>,
        dir: tempfile::TempDir,
        port: u16,
    ) -> Result<Self> {
        let name = match kind {
            S3Kind::S3sFs => "s3s-fs",
            S3Kind::Moto => "moto",
        };
        let started = Instant::now();
        let env = vec![
            // moto: whatever credentials come, in this region.
            (
                "MOTO_ALLOW_NONEXISTENT_REGION".to_string(),
                "true".to_string(),
            ),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
        ];
        let process =
            ServerProcess::start_with_env(name, bin, args, env, dir.path().join("server.log"))?;
        let mut server = Self {
            kind,
            port,
            backend: Backend::Process(process),
            dir,
            started_in: Duration::ZERO,
        };
        server.wait_answering(START_LIMIT)?;
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// Waits until the server answers HTTP (any status: s3s-fs refuses unsigned requests).
    fn wait_answering(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Backend::Process(p) = &mut self.backend
                && let Some(status) = p.try_wait()?
            {
                bail!(
                    "{} exited ({status}) before it answered\n--- its log ---\n{}",
                    p.name(),
                    p.log()
                );
            }
            match http(self.port, "GET", "/", Duration::from_secs(5)) {
                Ok(_) => return Ok(()),
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "{:?} does not answer on port {} after {limit:?}: {last}\n--- its log ---\n{}",
            self.kind,
            self.port,
            self.log()
        )
    }

    /// Which server this is.
    pub fn kind(&self) -> S3Kind {
        self.kind
    }

    /// How long the server took to answer after it was started.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A plain S3 client of bucket `bucket` on this server (path-style, the test
    /// credentials): a test's own reads and writes, with no credentials in its environment.
    pub fn client(&self, bucket: &str) -> Result<std::sync::Arc<object_store::aws::AmazonS3>> {
        let s3 = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region(REGION)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_virtual_hosted_style_request(false)
            .build()?;
        Ok(std::sync::Arc::new(s3))
    }

    /// Creates bucket `name` (s3s-fs: a directory under its root; moto: `PUT /name`,
    /// which moto takes unsigned).
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.contains(['/', '.', ' ']) {
            bail!("{name:?} is not a bucket name tests use");
        }
        match self.kind {
            S3Kind::S3sFs => {
                std::fs::create_dir_all(self.dir.path().join("root").join(name))?;
            }
            S3Kind::Moto => {
                let (status, body) = http(
                    self.port,
                    "PUT",
                    &format!("/{name}"),
                    Duration::from_secs(10),
                )?;
                if status != 200 {
                    bail!("moto: PUT /{name} answered {status}: {body}");
                }
            }
        }
        Ok(())
    }

    /// Makes bucket `bucket` send its `ObjectCreated:*` and `ObjectRemoved:*` events to
    /// the SQS queue `queue_arn` (moto only: s3s-fs has no notifications; moto delivers
    /// them to its own SQS, at this same endpoint).
    pub fn notify_queue(&self, bucket: &str, queue_arn: &str) -> Result<()> {
        if self.kind != S3Kind::Moto {
            bail!("{:?} sends no event notifications", self.kind);
        }
        let body = format!(
            "<NotificationConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <QueueConfiguration><Id>weft</Id><Queue>{queue_arn}</Queue>\
             <Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event>\
             </QueueConfiguration></NotificationConfiguration>"
        );
        let (status, answer) = http_with_body(
            self.port,
            "PUT",
            &format!("/{bucket}?notification"),
            &body,
            Duration::from_secs(10),
        )?;
        if status != 200 {
            bail!("moto: PUT /{bucket}?notification answered {status}: {answer}");
        }
        Ok(())
    }

    /// The environment a process needs to reach this server with `object_store` (and the
    /// AWS SDKs): credentials, region, plain HTTP allowed.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_REGION", REGION),
            ("AWS_DEFAULT_REGION", REGION),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// A repository spec linking `path` to `s3://BUCKET/PREFIX` on this server
    /// (path-style, this region, no automatic import or export, 1 GiB chunks).
    pub fn spec(&self, path: &str, bucket: &str, prefix: &str) -> RepoSpec {
        let prefix = prefix.trim_matches('/');
        RepoSpec {
            path: path.to_string(),
            url: if prefix.is_empty() {
                format!("s3://{bucket}")
            } else {
                format!("s3://{bucket}/{prefix}")
            },
            endpoint: Some(self.endpoint()),
            region: Some(REGION.to_string()),
            path_style: true,
            import_policy: RepoPolicy::default(),
            export_policy: RepoPolicy::default(),
            import_metadata: false,
            events: None,
            chunk_size: 1 << 30,
        }
    }

    /// Kills the server at once (in process: its port closed, every connection dropped).
    pub fn kill(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Process(p) => p.kill(),
            Backend::InProcess(s) => {
                s.kill();
                Ok(())
            }
        }
    }

    /// Starts the server again after [`S3Server::kill`], on the same port with the same
    /// data (moto keeps none), and waits until it answers.
    pub fn restart(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Process(p) => p.restart()?,
            Backend::InProcess(s) => s.serve()?,
        }
        self.wait_answering(START_LIMIT)
    }

    /// The fault injection of an in-process server (`None` for moto).
    pub fn faults(&self) -> Option<&Arc<Faults>> {
        match &self.backend {
            Backend::InProcess(s) => Some(s.faults()),
            Backend::Process(_) => None,
        }
    }

    /// The server's log so far (an in-process server's is the test's own output).
    pub fn log(&self) -> String {
        match &self.backend {
            Backend::Process(p) => p.log(),
            Backend::InProcess(_) => String::new(),
        }
    }
}

/// One HTTP/1.1 request without a body to 127.0.0.1:`port`; the status and body.
fn http(port: u16, method: &str, path: &str, timeout: Duration) -> Result<(u16, String)> {
    http_with_body(port, method, path, "", timeout)
}

/// One HTTP/1.1 request with `body` to 127.0.0.1:`port`; the status and body.
fn http_with_body(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // One write: `write!` on the stream would send each piece of the format in a write
    // (and a segment) of its own.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    // Bounded: a test server's answers are small.
    s.take(1 << 20).read_to_end(&mut reply)?;
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse::<u16>().ok())
        .with_context(|| format!("not an HTTP answer: {:?}", text.get(..80).unwrap_or(&text)))?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Ok((status, body))
}

/// The workspace's `target` directory (`CARGO_TARGET_DIR`, else next to the workspace's
/// `Cargo.toml`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Program `name` on `PATH`, in cargo's bin directories, or under `target/test-tools`
/// (its `bin` and its Python virtual environment's `bin`); an error naming `install`
/// when it is nowhere.
pub fn find_program(name: &str, install: &str) -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    let tools = target_dir().join("test-tools");
    dirs.push(tools.join("bin"));
    dirs.push(tools.join("venv/bin"));
    match dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
        Some(p) => Ok(p),
        None => bail!("{name} is not installed; this test needs it and never skips: run {install}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_names_its_install_command() {
        let e = find_program("weft-no-such-program", "`install it`").unwrap_err();
        let said = format!("{e:#}");
        assert!(
            said.contains("never skips") && said.contains("`install it`"),
            "{said}"
        );
    }

    #[test]
    fn plain_http_requests_read_the_status_and_body() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // The whole request head, however it was cut into segments.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early: {head:?}");
                head.extend_from_slice(&buf[..n]);
            }
            assert!(head.starts_with(b"PUT /bucket HTTP/1.1\r\n"));
            s.write_all(b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\nno")
                .unwrap();
        });
        let (status, body) = http(port, "PUT", "/bucket", Duration::from_secs(5)).unwrap();
        server.join().unwrap();
        assert_eq!((status, body.as_str()), (409, "no"));
    }
}
