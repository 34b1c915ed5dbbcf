//! End-to-end tests of the provisioner Lambda on a real moto server: the
//! built `cfn-limits-resource` binary under the local Lambda runtime API,
//! answering CloudFormation's custom-resource events at a local
//! `ResponseURL` and the unmodified Python CLI's direct invokes; what it
//! writes read back and exercised through the real zae-limiter 0.17.0
//! client. Levels a test needs beforehand are applied with the built
//! `zae-limits` (found beside this test's executable). The CLI's own tests
//! are `limits-cli/tests/moto.rs`.

use serde_json::{Value, json};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;
use zae_test_support::harness::*;
use zae_test_support::limits::*;

const LAMBDA: &str = env!("CARGO_BIN_EXE_cfn-limits-resource");

/// The build's version (Cargo.toml's) and the stamp it writes on a table.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const STAMP: &str = concat!("0.17.0+rust.", env!("CARGO_PKG_VERSION"));

/// A local `ResponseURL`: records each PUT body CloudFormation would receive.
fn response_receiver() -> (String, mpsc::Receiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/cfn-response", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (_, body) = read_http(&mut stream);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if tx
                .send(serde_json::from_slice(&body).unwrap_or(Value::Null))
                .is_err()
            {
                return;
            }
        }
    });
    (url, rx)
}

/// The built provisioner under the local Lambda endpoint, named as the
/// Python CLI and a table's stack name it: its function name, and the Lambda.
fn provisioner(table: &str) -> (String, Lambda) {
    let function = format!("{table}-limits-provisioner");
    let lambda = Lambda::start(&function, LAMBDA, &[], &scratch(&format!("{function}.log")));
    (function, lambda)
}

fn cfn_event(
    kind: &str,
    url: &str,
    request: &str,
    physical: Option<&str>,
    properties: Value,
) -> Value {
    let mut event = json!({
        "RequestType": kind,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
        "ResponseURL": format!("{url}?request={request}"),
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/guid",
        "RequestId": request,
        "LogicalResourceId": "TenantLimits",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ResourceProperties": properties,
    });
    if let Some(id) = physical {
        event["PhysicalResourceId"] = json!(id);
    }
    if kind == "Update" {
        event["OldResourceProperties"] = json!({});
    }
    event
}

fn tenant_properties(table: &str, tpm_soft: &str) -> Value {
    json!({
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
        "TableName": table,
        "Namespace": "default",
        "Resources": {"gpt-4": {"Limits": {
            "tpm": {"Capacity": "100", "RefillPeriod": "86400", "Soft": tpm_soft},
            "rpm": {"Capacity": "50"}
        }}}
    })
}

/// CloudFormation's side of one custom resource: the function it invokes,
/// the built provisioner serving it, and a local `ResponseURL` with the
/// answers that reach it.
struct Cfn {
    function: String,
    lambda: Lambda,
    url: String,
    answers: mpsc::Receiver<Value>,
}

impl Cfn {
    /// The built provisioner for `table` ([`provisioner`]).
    fn start(table: &str) -> Cfn {
        let (function, lambda) = provisioner(table);
        Cfn::serving(function, lambda)
    }

    fn serving(function: String, lambda: Lambda) -> Cfn {
        let (url, answers) = response_receiver();
        Cfn {
            function,
            lambda,
            url,
            answers,
        }
    }

    /// `event` to the Lambda, and the answer CloudFormation receives.
    fn send(&self, event: &Value) -> Value {
        self.lambda.invoke(&self.function, event);
        self.answers
            .recv_timeout(Duration::from_secs(120))
            .expect("CloudFormation got no answer")
    }

    /// A `Custom::ZaeLimiterLimits` request ([`cfn_event`]) and its answer.
    fn request(
        &self,
        kind: &str,
        request: &str,
        physical: Option<&str>,
        properties: Value,
    ) -> Value {
        self.send(&cfn_event(kind, &self.url, request, physical, properties))
    }
}

#[test]
fn a_stack_creates_restamps_and_deletes_its_levels() {
    let table = setup("limits-cfn");
    let cfn = Cfn::start(&table);

    let created = cfn.request("Create", "c1", None, tenant_properties(&table, "true"));
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    assert!(created.to_string().len() <= 4096);
    let physical = created["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert!(
        physical.starts_with(&format!("{table}/")) && physical.ends_with("/limits-provisioner")
    );
    assert_eq!(created["Data"]["created"], 1);
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 50, 50, 60, false),
            limit("tpm", 100, 100, 86_400, true)
        ])
    );
    assert!(
        read["audit"]["$RESOURCE:gpt-4"][0]["principal"]
            .as_str()
            .unwrap()
            .starts_with("arn:aws:cloudformation:")
    );

    // CloudFormation's own retry of the same request: answered alike, nothing rewritten.
    let retried = cfn.request("Create", "c1", None, tenant_properties(&table, "true"));
    assert_eq!(retried["Status"], "SUCCESS", "{retried}");
    assert_eq!(retried["PhysicalResourceId"], physical.as_str());
    assert_eq!(
        (
            retried["Data"]["created"].as_u64(),
            retried["Data"]["unchanged"].as_u64()
        ),
        (Some(0), Some(1))
    );
    let events =
        read_levels(&table, "default", &["resource:gpt-4"])["audit"]["$RESOURCE:gpt-4"].clone();
    assert_eq!(events.as_array().unwrap().len(), 1, "{events}");

    // Another stack may not take the namespace over, nor delete it.
    let mut intruder = cfn_event(
        "Create",
        &cfn.url,
        "c9",
        None,
        tenant_properties(&table, "false"),
    );
    intruder["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/other/guid");
    let refused = cfn.send(&intruder);
    assert_eq!(refused["Status"], "FAILED", "{refused}");
    assert!(
        refused["Reason"]
            .as_str()
            .unwrap()
            .contains("is managed by another custom resource")
    );
    let mut stray = cfn_event(
        "Delete",
        &cfn.url,
        "d9",
        Some(&physical),
        tenant_properties(&table, "false"),
    );
    stray["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/other/guid");
    assert_eq!(cfn.send(&stray)["Status"], "SUCCESS");
    let elsewhere = Some("other-table/ns/limits-provisioner");
    let properties = tenant_properties(&table, "false");
    assert_eq!(
        cfn.request("Delete", "d8", elsewhere, properties)["Status"],
        "SUCCESS"
    );
    let still = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        still["levels"]["resource:gpt-4"]["limits"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{still}"
    );

    // The CLI still works on a stack's namespace, and says whose it is.
    let owned = write_manifest(
        "owned.yaml",
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 50}}}}\n",
    );
    let planned = zae_limits(&["plan", "-f", owned.to_str().unwrap(), "-t", &table]);
    ok(&planned);
    let warning = String::from_utf8_lossy(&planned.stderr);
    assert!(
        warning.contains("is managed by the custom resource arn:aws:cloudformation")
            && warning.contains("|TenantLimits"),
        "{warning}"
    );

    // A bucket on the soft default: over the limit, and still admitted.
    let soft = acquire(&table, "user-1", &["tpm=80"], 2);
    assert_eq!(
        (soft["ok"].as_u64(), soft["rejected"].as_u64()),
        (Some(2), Some(0)),
        "{soft}"
    );

    let updated = cfn.request(
        "Update",
        "u1",
        Some(&physical),
        tenant_properties(&table, "false"),
    );
    assert_eq!(updated["Status"], "SUCCESS", "{updated}");
    assert_eq!(updated["PhysicalResourceId"], physical.as_str());
    let bucket = items(&table)
        .into_iter()
        .find(|(key, _)| key.contains("/BUCKET#user-1#gpt-4#") && key.ends_with(" #STATE"))
        .map(|(_, item)| item)
        .expect("user-1's bucket");
    assert!(
        bucket.get("b_tpm_soft").is_none(),
        "the soft stamp was not removed: {bucket}"
    );
    let hard = acquire(&table, "user-1", &["tpm=80"], 1);
    assert_eq!(hard["rejected"], 1, "{hard}");
    assert_eq!(hard["violated"], json!(["tpm"]));

    let deleted = cfn.request(
        "Delete",
        "d1",
        Some(&physical),
        tenant_properties(&table, "false"),
    );
    assert_eq!(deleted["Status"], "SUCCESS", "{deleted}");
    assert_eq!(deleted["Data"]["deleted"], 1);
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(read["levels"]["resource:gpt-4"]["limits"], json!([]));

    // The Delete released the namespace: the next stack that declares it takes it.
    let mut successor = cfn_event(
        "Create",
        &cfn.url,
        "c10",
        None,
        tenant_properties(&table, "false"),
    );
    successor["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/next/guid");
    let taken = cfn.send(&successor);
    assert_eq!(taken["Status"], "SUCCESS", "{taken}");
    let record = items(&table)
        .into_iter()
        .find(|(key, _)| key.ends_with("/SYSTEM# #PROVISIONER"))
        .map(|(_, item)| item)
        .expect("the state record");
    assert_eq!(
        record["cfn_owner"]["S"],
        "arn:aws:cloudformation:us-east-1:123456789012:stack/next/guid|TenantLimits"
    );
}

#[test]
fn a_failed_create_and_its_rollback_leave_the_namespace_alone() {
    let table = setup("limits-rollback");
    let existing = write_manifest(
        "rollback-existing.yaml",
        "namespace: default\nsystem: {limits: {rpm: {capacity: 77}}}\n",
    );
    ok(&zae_limits(&[
        "apply",
        "-f",
        existing.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let before = items(&table);
    let cfn = Cfn::start(&table);

    let mut bad = tenant_properties(&table, "true");
    bad["Resources"]["gpt-4"]["Limits"]["rpm"]["Capacity"] = json!("lots");
    let failed = cfn.request("Create", "c2", None, bad.clone());
    assert_eq!(failed["Status"], "FAILED");
    assert!(
        failed["Reason"]
            .as_str()
            .unwrap()
            .contains("Resources.gpt-4.Limits.rpm.Capacity: must be a whole number, got 'lots'"),
        "{failed}"
    );
    let marker = failed["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert_eq!(items(&table), before, "a failed Create wrote something");

    let rollback = cfn.request("Delete", "d2", Some(&marker), bad);
    assert_eq!(rollback["Status"], "SUCCESS", "{rollback}");
    assert_eq!(
        items(&table),
        before,
        "the rollback Delete wiped the namespace"
    );
    let read = read_levels(&table, "default", &["system"]);
    assert_eq!(
        read["levels"]["system"]["limits"],
        json!([limit("rpm", 77, 77, 60, false)])
    );
}

/// `zae-limiter limits COMMAND --name TABLE --file MANIFEST`, the unchanged
/// Python CLI, with DynamoDB on moto and Lambda on the shim.
fn python_cli(table: &str, lambda: &Lambda, command: &str, manifest: &std::path::Path) -> Output {
    let mut cmd = Command::new(python().parent().unwrap().join("zae-limiter"));
    cmd.args(["limits", command, "--name", table, "--file"])
        .arg(manifest);
    aws_env(&mut cmd, endpoint());
    cmd.env_remove("AWS_ENDPOINT_URL")
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint())
        .env("AWS_ENDPOINT_URL_LAMBDA", &lambda.url);
    cmd.output().expect("run zae-limiter")
}

#[test]
fn the_python_cli_plans_and_applies_through_the_lambda() {
    let table = setup("limits-pycli");
    let (function, lambda) = provisioner(&table);
    let manifest = write_manifest("pycli.yaml", TENANT);
    let cli = |command: &str| python_cli(&table, &lambda, command, &manifest);
    let plan = ok(&cli("plan"));
    assert!(plan.starts_with("Plan: 5 change(s)"), "{plan}");
    assert!(plan.contains("+ create entity: key-b/_default_"), "{plan}");
    let apply = ok(&cli("apply"));
    assert!(
        apply.contains("Applied: 5 created, 0 updated, 0 deleted."),
        "{apply}"
    );
    let again = ok(&cli("plan"));
    assert!(
        again.contains("No changes. Infrastructure is up-to-date."),
        "{again}"
    );
    let diff = ok(&cli("diff"));
    assert!(diff.contains("No drift detected."), "{diff}");
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 3, 3, 60, false),
            limit("tpm", 500, 500, 86_400, true)
        ])
    );
    assert!(
        read["audit"]["$RESOURCE:gpt-4"][0]["principal"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":function:{function}"))
    );
}

const PLAIN: &str = "namespace: default
resources:
  gpt-4:
    limits:
      rpm: {capacity: 100, refill_amount: 10}
";

const ADAPTIVE: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rpm: 600}
    limits:
      rpm: {capacity: 100, refill_amount: 10, adaptive: utilization}
";

/// The unchanged Python CLI on a namespace with every adaptive item in the
/// table (the declaration, a target at 5x, the table's tick record, its
/// canaries and their sensed set, a usage minute, and a bucket carrying a
/// stamp's record): `plan`, `diff` and `apply` print what
/// they print on the same config without them, the declaration shows as one
/// `adaptive` change, and the client reads the same levels.
#[test]
fn the_python_cli_plans_and_applies_an_adaptive_namespace_as_any_other() {
    use zae_table::adaptive::target::Target;
    use zae_table::adaptive::tick::{Tick, Written};
    use zae_table::adaptive::{Factor, canary, usage};
    use zae_table::store::{Returns, Store};
    let table = setup("limits-pycli-adaptive");
    let (_, lambda) = provisioner(&table);
    let plain = write_manifest("plain.yaml", PLAIN);
    let adaptive = write_manifest("adaptive.yaml", ADAPTIVE);
    let cli =
        |command: &str, manifest: &PathBuf| ok(&python_cli(&table, &lambda, command, manifest));

    let applied = cli("apply", &plain);
    assert!(applied.contains("Applied: 1 created"), "{applied}");
    let levels = read_levels(&table, "default", &["resource:gpt-4"])["levels"].clone();
    let (plan, diff) = (cli("plan", &plain), cli("diff", &plain));
    assert!(plan.contains("No changes."), "{plan}");
    assert!(diff.contains("No drift detected."), "{diff}");

    let planned = cli("plan", &adaptive);
    assert!(planned.starts_with("Plan: 1 change(s)"), "{planned}");
    assert!(
        planned.contains("+ create adaptive: gpt-4 rpm ~600/min"),
        "{planned}"
    );
    assert!(cli("apply", &adaptive).contains("Applied: 1 created"));

    // What the controller and the sensor add to the namespace.
    let ns = client(&["register", "--table", &table, "--namespace", "default"])["namespace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let store = dynamo_store(&table);
    let mut target = Target::base("gpt-4", "rpm");
    target.factor = Factor::from_ppm(5_000_000);
    target.generation = 1;
    target.stamped = 1;
    let now = chrono::Utc::now().timestamp_millis();
    let mut tick = Tick::default();
    tick.ticked(
        now,
        Some(Written {
            at_ms: now,
            count: 4,
        }),
    );
    let used = std::collections::BTreeMap::from([("rpm".to_owned(), 120_000)]);
    let minute = usage::minute_of(now) - usage::MINUTE_MS;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let writes = [
            target.write(&ns, None),
            tick.write(),
            usage::add(&ns, "gpt-4", minute, &used),
            canary::sense(now, &[0, 1, 2, 3]),
        ];
        for update in &writes {
            store.update(update, Returns::Nothing).await.unwrap();
        }
        for k in 0..4 {
            store.put(&canary::item(now, k), None).await.unwrap();
        }
    });

    assert_eq!(cli("plan", &adaptive), plan);
    assert_eq!(cli("diff", &adaptive), diff);
    let again = cli("apply", &adaptive);
    assert!(again.contains("No changes."), "{again}");
    assert_eq!(
        read_levels(&table, "default", &["resource:gpt-4"])["levels"],
        levels
    );
    let dropped = cli("plan", &plain);
    assert!(dropped.starts_with("Plan: 1 change(s)"), "{dropped}");
    assert!(dropped.contains("- delete adaptive"), "{dropped}");
}

fn table_event(kind: &str, url: &str, request: &str, table: &str, physical: Option<&str>) -> Value {
    let mut event = cfn_event(
        kind,
        url,
        request,
        physical,
        json!({
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
            "TableName": table,
            "Namespaces": ["default", "tenant-a"],
            "Version": VERSION
        }),
    );
    event["ResourceType"] = json!("Custom::ZaeLimiterTable");
    event["LogicalResourceId"] = json!("TableInit");
    event
}

/// The stack's `Custom::ZaeLimiterTable`, through the built Lambda, on a
/// table from the schema alone: it stamps the version record and registers
/// the namespaces; a tenant stack's soft limit then applies and reads back
/// through the client, while one naming an unregistered namespace fails
/// with the way out; the unchanged client opens the table with its default
/// `auto_update=True` and makes no Lambda or CloudFormation call (its calls
/// are recorded), and its own version gate takes a soft limit; the
/// resource's Delete puts the stamp back to the Python Lambdas' 0.17.0 and
/// keeps the namespaces.
#[test]
fn the_stack_initialises_its_table_and_the_unchanged_client_uses_it_without_updating_lambdas() {
    let table = schema_only_table("schema-stack");
    let cfn = Cfn::start(&table);
    let created = cfn.send(&table_event("Create", &cfn.url, "t1", &table, None));
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    assert_eq!(created["PhysicalResourceId"], format!("{table}/table"));
    let ids = created["Data"]["NamespaceIds"].clone();
    assert_eq!(version_record(&table)["lambda_version"], STAMP);

    let mut stray = tenant_properties(&table, "true");
    stray["Namespace"] = json!("tenant-b");
    let refused = cfn.request("Create", "t2", None, stray);
    assert_eq!(refused["Status"], "FAILED", "{refused}");
    let reason = refused["Reason"].as_str().unwrap();
    assert!(
        reason.contains("'tenant-b' is not registered") && reason.contains("Namespaces"),
        "{reason}"
    );
    let tenant = tenant_properties(&table, "true");
    assert_eq!(
        cfn.request("Create", "t3", None, tenant)["Status"],
        "SUCCESS"
    );
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(read["namespace_id"], ids["default"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 50, 50, 60, false),
            limit("tpm", 100, 100, 86_400, true)
        ])
    );

    let opened = run_json("stack_table.py", &["open", "--table", &table]);
    let calls: Vec<&str> = opened["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("lambda:") || c.starts_with("cloudformation:")),
        "{calls:?}"
    );
    assert_eq!(opened["namespace_id"], ids["default"]);
    assert_eq!(opened["limits"][0]["soft"], true, "{opened}");

    let delete = table_event(
        "Delete",
        &cfn.url,
        "t4",
        &table,
        Some(&format!("{table}/table")),
    );
    assert_eq!(cfn.send(&delete)["Status"], "SUCCESS");
    assert_eq!(version_record(&table)["lambda_version"], "0.17.0");
    let kept = client(&["register", "--table", &table, "--namespace", "tenant-a"]);
    assert_eq!(kept["namespace_id"], ids["tenant-a"]);
}

/// The first line a function's log holds from its bootstrap (the shim's own
/// notes left out), as JSON.
fn first_log_line(function: &str) -> Value {
    let log = std::fs::read_to_string(scratch(&format!("{function}.log"))).unwrap();
    let first = log
        .lines()
        .find(|l| !l.starts_with("[lambda_shim"))
        .expect("the function logged nothing");
    serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"))
}

/// The client's version checks on a table, as `stack_table.py gates` runs them.
fn client_gates(table: &str) -> Value {
    run_json("stack_table.py", &["gates", "--table", table])
}

const GATES: [&str; 5] = [
    "reset_after",
    "non_enforcing",
    "cascade_policy",
    "parent_move",
    "top_up",
];

/// A stack upgraded from a build before 0.8.0: its table reads that build's
/// stamp `0.17.0+rust`, owned by the stack's `TableInit`. The Update the new
/// template's `Version` brings re-stamps it with this build's, through the
/// built Lambda, whose first log line names both. The unchanged 0.17.0 client
/// then finds the table compatible with no Lambda update, connects, and
/// passes every gate that reads `lambda_version` (a write through each). The
/// Delete restores 0.17.0 from an earlier build's stamp as well. A control:
/// the same checks refuse a record stamped with the bare crate version.
#[test]
fn a_table_an_earlier_build_stamped_is_restamped_and_the_unchanged_client_passes_every_gate() {
    let table = schema_only_table("restamp");
    let cfn = Cfn::start(&table);
    assert_eq!(
        cfn.send(&table_event("Create", &cfn.url, "r1", &table, None))["Status"],
        "SUCCESS"
    );
    let first = first_log_line(&cfn.function);
    assert_eq!(first["version"], VERSION, "{first}");
    assert_eq!(first["table_stamp"], STAMP, "{first}");

    let earlier = || {
        client(&[
            "lambda-version",
            "--table",
            &table,
            "--version",
            "0.17.0+rust",
        ])
    };
    earlier();
    let physical = format!("{table}/table");
    let update = table_event("Update", &cfn.url, "r2", &table, Some(&physical));
    let updated = cfn.send(&update);
    assert_eq!(updated["Status"], "SUCCESS", "{updated}");
    let record = version_record(&table);
    assert_eq!(record["lambda_version"], STAMP, "{record}");
    assert_eq!(record["updated_by"], format!("cfn:{STAMP}"), "{record}");

    let gates = client_gates(&table);
    assert_eq!(gates["compatibility"]["is_compatible"], true, "{gates}");
    assert_eq!(
        gates["compatibility"]["requires_lambda_update"], false,
        "{gates}"
    );
    assert_eq!(gates["connect"], "accepted", "{gates}");
    for gate in GATES {
        assert_eq!(gates["gates"][gate], "accepted", "{gate}: {gates}");
    }

    earlier();
    let delete = table_event("Delete", &cfn.url, "r3", &table, Some(&physical));
    assert_eq!(cfn.send(&delete)["Status"], "SUCCESS");
    assert_eq!(version_record(&table)["lambda_version"], "0.17.0");

    client(&["lambda-version", "--table", &table, "--version", VERSION]);
    let refused = client_gates(&table);
    assert_eq!(
        refused["compatibility"]["requires_lambda_update"], true,
        "{refused}"
    );
    assert!(
        refused["connect"].as_str().unwrap().starts_with("refused"),
        "{refused}"
    );
    for gate in GATES {
        let said = refused["gates"][gate].as_str().unwrap();
        assert!(said.starts_with("refused"), "{gate}: {said}");
    }
}

/// `--version` of both binaries: the build and the stamp it writes. The
/// Lambda bootstrap takes no other argument, and says so.
#[test]
fn the_binaries_name_their_build_and_table_stamp() {
    let zae_limits = workspace_binary("zae-limits", "zae-limits");
    let lambda = std::path::Path::new(LAMBDA);
    for (binary, name) in [
        (zae_limits.as_path(), "zae-limits"),
        (lambda, "cfn-limits-resource"),
    ] {
        let out = Command::new(binary).arg("--version").output().unwrap();
        assert_eq!(
            ok(&out),
            format!("{name} {VERSION} (table stamp {STAMP})\n"),
            "{}",
            binary.display()
        );
    }
    let out = Command::new(LAMBDA).arg("apply").output().unwrap();
    assert_eq!(code(&out), Some(64));
    let said = stderr(&out);
    assert!(said.contains("unexpected argument \"apply\""), "{said}");
}

/// `tests/harness/fault_proxy.py` in front of moto, passing the first
/// `writes` writes and refusing every later one as a role would
/// (AccessDeniedException): its endpoint, and the process (killed when
/// dropped; it also exits with this test).
fn denying_proxy(writes: u32) -> (String, ChildGuard) {
    use std::io::BufRead;
    let mut child = Command::new(python())
        .arg(harness("fault_proxy.py"))
        .args(["--target", moto(), "--deny-after", &writes.to_string()])
        .args(["--parent-pid", &std::process::id().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the fault proxy");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("the proxy's port");
    let port: u16 = line.trim().parse().expect("the proxy prints its port");
    wait_for_port(port, "fault proxy", &mut child);
    (format!("http://127.0.0.1:{port}"), ChildGuard(child))
}

struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `#PROVISIONER` record's managed set and owner, on moto.
fn managed_record(table: &str) -> (Value, Value, Value, Value) {
    let record = items(table)
        .into_iter()
        .find(|(key, _)| key.ends_with("/SYSTEM# #PROVISIONER"))
        .map(|(_, item)| item)
        .expect("the state record");
    (
        record["managed_system"].clone(),
        record["managed_resources"].clone(),
        record["managed_entities"].clone(),
        record["cfn_owner"].clone(),
    )
}

/// Issue 40, item 9, as a user met it: the built Lambda under the local
/// Runtime API on moto, its DynamoDB behind a proxy that lets the claim
/// through and refuses the next write. The CLI applied `gpt-5` at 50 and
/// `claude` at 70; a stack's Create of `gpt-5` at 100 fails after its
/// claim; its rollback Delete used to answer SUCCESS ("1 deleted") and
/// leave no `gpt-5` at all, and the managed set empty (a CLI apply that
/// dropped `claude` left it at 70). Now the real client reads the CLI's
/// levels back, and the CLI still manages them.
#[test]
fn the_rollback_of_a_failed_create_leaves_the_clis_overlapping_levels() {
    let table = setup("limits-overlap");
    let cli = "namespace: default\nsystem: {limits: {tpm: {capacity: 1000}}}\nresources:\n  \
               gpt-5: {limits: {rpm: {capacity: 50}}}\n  claude: {limits: {rpm: {capacity: 70}}}\n";
    let manifest = write_manifest("overlap-cli.yaml", cli);
    ok(&zae_limits(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let before = managed_record(&table);
    let mut properties = tenant_properties(&table, "false");
    properties["Resources"] = json!({"gpt-5": {"Limits": {"rpm": {"Capacity": "100"}}}});
    let failed = {
        let (proxy, _proxy) = denying_proxy(1);
        let function = format!("{table}-limits-provisioner");
        let log = scratch(&format!("{function}-denied.log"));
        let env = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.as_str())];
        let denied = Lambda::start(&function, LAMBDA, &env, &log);
        Cfn::serving(function, denied).request("Create", "c1", None, properties.clone())
    };
    assert_eq!(failed["Status"], "FAILED", "{failed}");
    assert!(
        failed["Reason"].as_str().unwrap().contains("AccessDenied"),
        "{failed}"
    );
    let failed_id = failed["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert!(failed_id.ends_with("/failed"), "{failed_id}");
    let stack = "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/guid|TenantLimits";
    assert_eq!(managed_record(&table).3["S"], stack, "the claim landed");

    let cfn = Cfn::start(&table);
    let rolled = cfn.request("Delete", "d1", Some(&failed_id), properties);
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    let levels = ["system", "resource:gpt-5", "resource:claude"];
    let read = read_levels(&table, "default", &levels);
    assert_eq!(
        read["levels"]["resource:gpt-5"]["limits"],
        json!([limit("rpm", 50, 50, 60, false)]),
        "{rolled}"
    );
    assert_eq!(
        read["levels"]["resource:claude"]["limits"],
        json!([limit("rpm", 70, 70, 60, false)])
    );
    assert_eq!(
        read["levels"]["system"]["limits"],
        json!([limit("tpm", 1000, 1000, 60, false)])
    );
    assert_eq!(
        managed_record(&table),
        before,
        "the managed set and no owner"
    );

    // The CLI still manages `claude`: dropping it deletes it.
    let dropped = cli.replace("  claude: {limits: {rpm: {capacity: 70}}}\n", "");
    let manifest = write_manifest("overlap-cli-dropped.yaml", &dropped);
    ok(&zae_limits(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let read = read_levels(&table, "default", &["resource:claude"]);
    assert_eq!(read["levels"]["resource:claude"]["limits"], json!([]));
}

// The Lambda under the local Runtime API shim needs only DynamoDB: these
// run on AWS's DynamoDB Local too.
zae_test_support::also_on_dynamodb_local!(
    a_stack_creates_restamps_and_deletes_its_levels,
    a_failed_create_and_its_rollback_leave_the_namespace_alone,
    the_stack_initialises_its_table_and_the_unchanged_client_uses_it_without_updating_lambdas,
);
