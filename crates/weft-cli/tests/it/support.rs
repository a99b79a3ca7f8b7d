//! What every area's tests share: the `weft` binary under test and running it as a command
//! with a bound on its run time, so that a command that hangs fails its test instead of
//! blocking the whole binary.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use weft_client::OpenOptions;
use weft_proto::mdt::AccessMode;

/// Open for reading and writing, creating the file (0644) if it is missing.
pub const RW: OpenOptions = OpenOptions {
    access: AccessMode::ReadWrite,
    create: Some(0o644),
    exclusive: false,
    truncate: false,
    append: false,
};

/// Longest a `weft` command run by [`weft_run`] may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// Writes `data` as the whole of a new file at `path` (through a mount) and makes it
/// durable.
pub fn write_synced(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// The `weft` binary under test: the one cargo built with this test, or the one
/// `WEFT_TEST_BIN` names (a release build, or a copy that a long run keeps while the tree
/// is rebuilt).
pub fn bin() -> &'static Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("WEFT_TEST_BIN") {
        Some(p) if !p.is_empty() => p.into(),
        _ => env!("CARGO_BIN_EXE_weft").into(),
    })
}

/// Runs `weft args...` with `input` on its standard input and returns what it did; panics
/// (after killing it) if it runs longer than [`COMMAND_LIMIT`].
pub fn weft_run(args: &[&str], input: &str) -> Output {
    weft_run_env(args, input, &[], COMMAND_LIMIT)
}

/// [`weft_run`] with extra environment variables (a store's credentials, say) and another
/// limit on its run time.
pub fn weft_run_env(
    args: &[&str],
    input: &str,
    env: &[(String, String)],
    limit: Duration,
) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A command that does not read its input closes the pipe: that is not an error.
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let pid = rustix::process::Pid::from_child(&child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            panic!("weft {args:?} did not exit in {limit:?}");
        }
    }
}

/// Runs `weft args...` and returns (success, stdout, stderr).
pub fn weft(args: &[&str]) -> (bool, String, String) {
    weft_stdin(args, "")
}

/// [`weft`] with `input` on its standard input.
pub fn weft_stdin(args: &[&str], input: &str) -> (bool, String, String) {
    let out = weft_run(args, input);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`weft`] with extra environment variables, and at most `limit` to run.
pub fn weft_env(
    args: &[&str],
    env: &[(String, String)],
    limit: Duration,
) -> (bool, String, String) {
    let out = weft_run_env(args, "", env, limit);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
