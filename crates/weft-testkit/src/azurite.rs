//! Azurite, Microsoft's Azure Storage emulator (Node.js), as the real Azure Storage server
//! of the `az://` repository tests: its Blob service (the store) and Queue service (where
//! a container's Event Grid events go), one process on 127.0.0.1 with its data in a
//! temporary directory, stopped on drop. It checks Shared Key signatures with the
//! emulator's well-known account and key.
//!
//! `azurite` is found like moto ([`crate::s3::find_program`]): `test.sh` installs it
//! with npm under `target/test-tools`.

use crate::s3::find_program;
use crate::{ServerProcess, free_port};
use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The emulator's account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// The emulator's well-known account key (public: Microsoft documents it).
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The API version of the test's own requests.
const API_VERSION: &str = "2021-08-06";
/// How long Azurite may take to answer after it starts.
const START_LIMIT: Duration = Duration::from_secs(60);

/// One Azurite server (Blob, Queue and Table services).
pub struct AzureServer {
    /// The Blob service's port.
    port: u16,
    /// The Queue service's port.
    queue_port: u16,
    process: ServerProcess,
    /// Azurite's data and log.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for AzureServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl AzureServer {
    /// Starts `azurite` on free ports and waits until its Blob and Queue services answer.
    pub fn start() -> Result<Self> {
        let bin = find_program(
            "azurite",
            "./test.sh (it installs the test tools), or `npm install --prefix \
             target/test-tools/azurite azurite` and a link to its \
             node_modules/.bin/azurite in target/test-tools/bin",
        )?;
        let dir = tempfile::tempdir()?;
        let (port, queue_port, table_port) = (free_port()?, free_port()?, free_port()?);
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let mut args: Vec<String> = Vec::new();
        for (service, p) in [("blob", port), ("queue", queue_port), ("table", table_port)] {
            args.extend([
                format!("--{service}Host"),
                "127.0.0.1".into(),
                format!("--{service}Port"),
                p.to_string(),
            ]);
        }
        args.extend([
            "--location".into(),
            data.display().to_string(),
            "--skipApiVersionCheck".into(),
            "--silent".into(),
        ]);
        let process = ServerProcess::start_with_env(
            "azurite",
            &bin,
            args,
            Vec::new(),
            dir.path().join("server.log"),
        )?;
        let mut server = Self {
            port,
            queue_port,
            process,
            _dir: dir,
        };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Some(status) = server.process.try_wait()? {
                bail!(
                    "azurite exited ({status}) before it answered\n--- its log ---\n{}",
                    server.process.log()
                );
            }
            let answers = |p: u16| {
                TcpStream::connect_timeout(&([127, 0, 0, 1], p).into(), Duration::from_secs(1))
                    .is_ok()
            };
            if answers(port) && answers(queue_port) {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!("azurite does not answer on port {port} after {START_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The account's endpoint (path style: `http://127.0.0.1:PORT/ACCOUNT`), for
    /// `weft repo create --endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.port)
    }

    /// The URL of the account's storage queue `name` (path style), for `--events`.
    pub fn queue_url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}/{name}", self.queue_port)
    }

    /// The environment a process needs to reach this server with `object_store`: the
    /// account and its key.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AZURE_STORAGE_ACCOUNT_NAME".into(), ACCOUNT.into()),
            ("AZURE_STORAGE_ACCOUNT_KEY".into(), ACCOUNT_KEY.into()),
        ]
    }

    /// A client of container `name` (the test's own reads and writes).
    pub fn client(&self, name: &str) -> Result<Arc<object_store::azure::MicrosoftAzure>> {
        let store = object_store::azure::MicrosoftAzureBuilder::new()
            .with_account(ACCOUNT)
            .with_access_key(ACCOUNT_KEY)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_container_name(name)
            .build()?;
        Ok(Arc::new(store))
    }

    /// Creates container `name` (a Shared Key signed `PUT ?restype=container`: no
    /// `object_store` call makes containers).
    pub fn create_container(&self, name: &str) -> Result<()> {
        let date = httpdate::fmt_http_date(SystemTime::now());
        // Shared Key: the verb, eleven standard headers (only Content-Length is set, and 0
        // is given as empty), the x-ms- headers, then the resource: the account, the path
        // (which names the account again in path style) and the query parameters.
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{API_VERSION}\n\
             /{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
        );
        let key = BASE64.decode(ACCOUNT_KEY).context("the account key")?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).context("the account key")?;
        mac.update(to_sign.as_bytes());
        let signature = BASE64.encode(mac.finalize().into_bytes());
        let request = format!(
            "PUT /{ACCOUNT}/{name}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             x-ms-date: {date}\r\nx-ms-version: {API_VERSION}\r\n\
             Authorization: SharedKey {ACCOUNT}:{signature}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            port = self.port
        );
        let timeout = Duration::from_secs(10);
        let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(request.as_bytes())?;
        let mut reply = Vec::new();
        s.take(1 << 20).read_to_end(&mut reply)?;
        let reply = String::from_utf8_lossy(&reply);
        if !reply.starts_with("HTTP/1.1 201") {
            bail!("azurite: creating container {name}: {reply}");
        }
        Ok(())
    }

    /// Azurite's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}
