//! `--num-shards/--shard-id` and `tchseq merge`: three shards merged equal one run, byte for
//! byte, for translate (jsonl, fairseq) and score (csv, tsv, jsonl); the Slurm and Kubernetes
//! examples run the same script.

use std::path::Path;
use std::process::Command;

use crate::util::{repo, tchseq};

const MODEL: &str = "weights/multi30k.en-de";

fn sentences() -> Vec<u8> {
    let mut text = String::new();
    for s in [
        "A man in a blue shirt is riding a bike.",
        "Two dogs are playing in the snow.",
        "A little girl is eating an ice cream.",
        "A woman sits on a bench.",
        "",
        "Three people are walking down the street at night.",
        "A boy jumps into a lake.",
        "The cat sleeps.",
        "A group of men are playing soccer on a field.",
        "Children are dancing.",
    ] {
        text.push_str(s);
        text.push('\n');
    }
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"not \xff utf-8\n");
    bytes.extend_from_slice("A dog runs. ".repeat(300).as_bytes());
    bytes.extend_from_slice(b"\nA horse eats hay.\n");
    bytes
}

/// Exits 2 when the lines it computed include the unreadable or the too long one (every other
/// line translated), else 0.
fn translate(args: &[&str], input: &Path, output: &Path) -> i32 {
    let out = tchseq().args(["translate", "-m"]).arg(repo(MODEL)).args(args).arg("--input").arg(input).arg("--output").arg(output).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 2, "{}", String::from_utf8_lossy(&out.stderr));
    code
}

fn merge(files: &[std::path::PathBuf]) -> std::process::Output {
    tchseq().arg("merge").args(files).output().unwrap()
}

#[test]
fn three_translate_shards_merge_into_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, sentences()).unwrap();
    for format in ["jsonl", "fairseq"] {
        let batching = ["--format", format, "--max-tokens", "60", "--buffer-size", "3"];
        let single = dir.path().join(format!("single.{format}"));
        assert_eq!(translate(&batching, &input, &single), 2);
        let mut parts = Vec::new();
        for i in 0..3 {
            let part = dir.path().join(format!("part{i}.{format}"));
            let shard = ["--num-shards", "3", "--shard-id", &i.to_string()];
            let _ = translate(&[&batching[..], &shard[..]].concat(), &input, &part);
            assert!(!std::fs::read(&part).unwrap().is_empty());
            parts.push(part);
        }
        parts.reverse();
        let merged = merge(&parts);
        assert!(merged.status.success(), "{}", String::from_utf8_lossy(&merged.stderr));
        // W- lines are wall-clock timings, different in any two runs
        let untimed = |b: &[u8]| crate::util::result_lines(&String::from_utf8_lossy(b));
        let single = std::fs::read(&single).unwrap();
        assert_eq!(untimed(&merged.stdout), untimed(&single), "{format}");
    }
    // a shard given twice, a shard missing, a missing tail shard found by --lines
    let jsonl = |i: usize| dir.path().join(format!("part{i}.jsonl"));
    let out = merge(&[jsonl(0), jsonl(1), jsonl(1), jsonl(2)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a shard given twice?"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = merge(&[jsonl(0), jsonl(2)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("are in none of the files (a shard missing?)"));
    let out = tchseq().args(["merge", "--lines", "14"]).arg(jsonl(0)).arg(jsonl(1)).arg(jsonl(2)).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lines 14, but the files hold 13 records"));
}

#[test]
fn sharding_refuses_what_it_cannot_merge() {
    for (args, message) in [
        (&["--num-shards", "2", "--shard-id", "2"][..], "--shard-id must be between 0 and --num-shards - 1 (1)"),
        (&["--num-shards", "2"][..], "needs --format jsonl or fairseq"),
        (&["--num-shards", "2", "--format", "jsonl", "--sampling", "--beam", "2", "--nbest", "2"][..], "cannot be combined with --sampling"),
    ] {
        let out = tchseq().args(["translate", "-m"]).arg(repo(MODEL)).args(args).arg("x").output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{err}");
    }
}

#[test]
fn three_score_shards_merge_into_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("id,source,target\n");
    let pairs = [
        ("A dog runs.", "Ein Hund rennt."),
        ("Two dogs are playing in the snow.", "Zwei Hunde spielen im Schnee."),
        ("A \"quoted\", tricky, source", "Eine Quelle"),
        ("", "leer"),
        ("A man rides a bike.", "Ein Mann fährt Fahrrad."),
        ("The cat sleeps.", "Die Katze schläft."),
        ("Children are dancing.", "Kinder tanzen."),
    ];
    for (i, (s, t)) in pairs.iter().enumerate() {
        csv.push_str(&format!("{i},\"{}\",{t}\n", s.replace('"', "\"\"")));
    }
    for (format, delimiter) in [("csv", ","), ("csv", "\\t"), ("jsonl", ",")] {
        let text = if delimiter == "," { csv.clone() } else { csv.replace(',', "\t") };
        let input = dir.path().join("pairs.txt");
        std::fs::write(&input, text).unwrap();
        let run = |extra: &[&str], output: &Path| -> i32 {
            let out = tchseq()
                .args(["score", "-q", "-m"])
                .arg(repo(MODEL))
                .args(["--format", format, "--delimiter", delimiter, "--buffer-size", "2", "--per-token"])
                .args(extra)
                .arg("--input")
                .arg(&input)
                .arg("--output")
                .arg(output)
                .output()
                .unwrap();
            let code = out.status.code().unwrap_or(-1);
            assert!(code == 0 || code == 2, "{}", String::from_utf8_lossy(&out.stderr));
            code
        };
        let single = dir.path().join("single.out");
        // the empty source is its own error row
        assert_eq!(run(&[], &single), 2);
        let parts: Vec<_> = (0..3).map(|i| dir.path().join(format!("part{i}.out"))).collect();
        for (i, part) in parts.iter().enumerate() {
            let _ = run(&["--num-shards", "3", "--shard-id", &i.to_string()], part);
        }
        let merged = merge(&parts);
        assert!(merged.status.success(), "{format}/{delimiter}: {}", String::from_utf8_lossy(&merged.stderr));
        assert_eq!(String::from_utf8_lossy(&merged.stdout), String::from_utf8_lossy(&std::fs::read(&single).unwrap()), "{format}/{delimiter}");
    }
}

#[test]
fn the_slurm_and_kubernetes_examples_run_the_shards_that_merge_into_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let lines: Vec<&str> = vec!["A dog runs.", "Two dogs are playing in the snow.", "The cat sleeps.", "A boy jumps into a lake.", "Children are dancing."];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out_dir = dir.path().join("out");
    let bin = env!("CARGO_BIN_EXE_tchseq");
    let examples = repo("examples/sharding");
    let slurm = std::fs::read_to_string(examples.join("slurm.sh")).unwrap();
    let k8s = std::fs::read_to_string(examples.join("k8s-indexed-job.yaml")).unwrap();
    assert!(slurm.contains("SHARD_ID=\"$SLURM_ARRAY_TASK_ID\"") && slurm.contains("run-shard.sh"));
    assert!(k8s.contains("completionMode: Indexed") && k8s.contains("SHARD_ID=$JOB_COMPLETION_INDEX exec bash examples/sharding/run-shard.sh"));
    // the three array tasks, as Slurm starts them
    for i in 0..3 {
        let status = Command::new("bash")
            .arg(examples.join("slurm.sh"))
            .env("SLURM_ARRAY_TASK_ID", i.to_string())
            // the single run below uses the test thread count: the bits depend on it
            .env("SLURM_CPUS_PER_TASK", crate::util::test_threads().to_string())
            .env("NUM_SHARDS", "3")
            .env("BUFFER_SIZE", "2")
            .env("MODEL", repo(MODEL))
            .env("INPUT", &input)
            .env("OUTDIR", &out_dir)
            .env("TCHSEQ", bin)
            .env_remove("LD_LIBRARY_PATH")
            .status()
            .unwrap();
        assert!(status.success());
    }
    let parts: Vec<_> = (0..3).map(|i| out_dir.join(format!("part-{i}.jsonl"))).collect();
    let merged = merge(&parts);
    assert!(merged.status.success(), "{}", String::from_utf8_lossy(&merged.stderr));
    let single = tchseq()
        .args(["translate", "-m"])
        .arg(repo(MODEL))
        .args(["--format", "jsonl", "--max-tokens", "4096", "--buffer-size", "2", "--input"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(single.status.success());
    assert_eq!(String::from_utf8_lossy(&merged.stdout), String::from_utf8_lossy(&single.stdout));
}
