//! What every end-to-end test shares: the test venv's Python, the harness
//! scripts, one moto server per test run, and unique table names.

use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The repository: this crate lives in `tests/support`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support has a repository above it")
        .to_path_buf()
}

pub fn python() -> PathBuf {
    let path = std::env::var_os("ZAE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/test.sh, which creates the test venv",
        path.display()
    );
    path
}

pub fn harness(script: &str) -> PathBuf {
    repo_root().join("tests/harness").join(script)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_for_port(port: u16, what: &str, child: &mut Child) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status} before listening on {port}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} did not listen on {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn moto() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        if let Ok(endpoint) = std::env::var("ZAE_MOTO_ENDPOINT") {
            return endpoint;
        }
        let port = free_port();
        let mut child = Command::new(python())
            .arg(harness("moto_server.py"))
            .arg(port.to_string())
            .args(["--parent-pid", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto");
        wait_for_port(port, "moto", &mut child);
        std::mem::forget(child);
        format!("http://127.0.0.1:{port}")
    })
}

pub fn aws_env(cmd: &mut Command, endpoint: &str) {
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_PROFILE");
}

pub fn run_json(script: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(harness(script)).args(args);
    aws_env(&mut cmd, moto());
    let out = cmd.output().expect("run python");
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}):\n{text}"))
}

pub fn unique_table(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}
