//! `llm-oom explain snapshot.pickle` through the real binary: PyTorch's allocator record (the
//! fixtures real Python wrote in the documented shape, tests/fixtures/snapshot/make_fixtures.py)
//! gives the cause, the attributed bytes and exit 1; a hostile pickle is exit 2 in one line.

mod util;

use serde_json::Value;
use util::{run, temp};

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/snapshot/{name}.pickle",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn each_recorded_oom_gets_its_cause_from_the_record() {
    let home = temp();
    for (name, cause) in [
        ("load_oom", "weights"),
        ("long_prompt_oom", "activations"),
        ("kv_cache_oom", "kv_cache"),
        ("fragmented", "fragmentation"),
    ] {
        let r = run(home.path(), &["explain", &fixture(name), "--json"]);
        assert_eq!(r.code, 1, "{name}: {}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).expect("json");
        assert_eq!(v["source"], "pytorch_snapshot");
        assert_eq!(v["verdict"]["cause"], cause, "{name}");
        assert!(v["verdict"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with(cause)));
        assert!(v["record"]["breakdown"]
            .as_array()
            .is_some_and(|b| !b.is_empty()));
    }
    let r = run(home.path(), &["explain", &fixture("long_prompt_oom")]);
    assert!(r.stdout.contains("modeling_mistral.py:54"), "{}", r.stdout);
    assert!(
        r.stdout.contains("failed request: 1.07 GiB"),
        "{}",
        r.stdout
    );
    let r = run(
        home.path(),
        &["explain", &fixture("fragmented"), "--markdown"],
    );
    assert!(r
        .stdout
        .contains("| live bytes | bytes | share | top sites |"));
}

#[test]
fn a_pickle_that_names_code_is_refused_in_one_line() {
    let home = temp();
    // protocol 2, GLOBAL os.system, then STOP: what an unpickler would call.
    let bad = home.path().join("evil.pickle");
    std::fs::write(&bad, b"\x80\x02cos\nsystem\n.").expect("write");
    let r = run(home.path(), &["explain", bad.to_str().expect("utf-8")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
}
