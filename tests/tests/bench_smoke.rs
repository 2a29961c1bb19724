//! Smoke test of the benchmark suite: `ni-bench latency --quick` runs ni (through nirun and a
//! private daemon) and the socket baselines, and writes well-formed JSON, table and plot.
//! No timing is asserted: benchmarks are not timed tests (see tests/bench/README.md).

use std::process::Command;

use ni_tests::binary;

#[test]
fn ni_bench_quick_latency_writes_results() {
    let nirun = binary("nirun");
    binary("ni-device");
    let out = std::env::temp_dir().join(format!("ni-bench-smoke-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_ni-bench"))
        .args([
            "latency",
            "--quick",
            "--baselines",
            "tcp,unix",
            "--placements",
            "split",
            "--out",
        ])
        .arg(&out)
        .env("NIRUN", &nirun)
        .output()
        .expect("ni-bench runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "ni-bench failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        run.status
    );
    assert!(stdout.contains("# latency"), "no table:\n{stdout}");
    assert!(stdout.contains("# targets"), "no targets:\n{stdout}");

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
            .expect("results.json is JSON");
    assert_eq!(doc["tool"], "ni-bench");
    assert!(doc["machine"]["cpus"].as_u64().unwrap() >= 1);
    let points = doc["points"].as_array().unwrap();
    for t in ["ni", "tcp", "unix"] {
        let mine: Vec<_> = points.iter().filter(|p| p["transport"] == t).collect();
        let sizes: Vec<u64> = mine.iter().map(|p| p["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, vec![0, 8, 4096], "{t}: {sizes:?}");
        for p in mine {
            assert_eq!(p["metric"], "latency");
            assert!(p["error"].is_null(), "{p}");
            assert!(!p["batches"].as_array().unwrap().is_empty());
            let v = p["stats"]["value"].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{p}");
            assert!(p["stats"]["spread"].as_f64().is_some());
            assert!(p["stats"]["disturbed"].is_boolean());
        }
    }
    let targets = doc["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4);
    assert!(doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ok"] == true));
    let svg = std::fs::read_to_string(out.join("plot-split.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(std::fs::read_to_string(out.join("table.txt"))
        .unwrap()
        .contains("# latency"));
    let _ = std::fs::remove_dir_all(&out);
}
