//! CLI conventions shared by every command.

use crate::util::tchseq;

#[test]
fn doctor_reports_the_manifest_s_libtorch_without_ld_library_path() {
    let out = tchseq().args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = report["libtorch_version"].as_str().unwrap();
    assert_eq!(version.split('+').next().unwrap(), crate::util::manifest_torch_release(), "report: {report}");
    assert!(report["intra_op_threads"].as_i64().unwrap() >= 1);
    let libraries: Vec<&str> = report["libraries"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(libraries.iter().any(|l| l.starts_with("libtorch_cpu.so")), "{libraries:?}");
    assert!(libraries.iter().any(|l| l.starts_with("libc10.so")), "{libraries:?}");
    if cfg!(target_os = "linux") {
        assert!(!report["cpu_model"].as_str().unwrap_or_default().is_empty(), "{report}");
    }
}

#[test]
fn doctor_human_form_names_the_version() {
    let out = tchseq().arg("doctor").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("libtorch_version")).unwrap();
    assert!(line.contains(crate::util::manifest_torch_release()), "{line}");
}

#[test]
fn help_lists_every_subcommand_and_each_has_help() {
    let out = tchseq().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for cmd in ["translate", "score", "verify", "inspect", "encode", "decode", "doctor"] {
        assert!(text.contains(cmd), "--help lacks {cmd}");
        let sub = tchseq().args([cmd, "--help"]).output().unwrap();
        assert!(sub.status.success(), "{cmd} --help failed");
        let help = String::from_utf8(sub.stdout).unwrap();
        assert!(help.contains("Example"), "{cmd} --help has no example");
    }
}

/// `translate --buffer-size` shows no `[default: 0]`: its help says the default (the batch
/// size, or 2048 lines for a file); 0 is only how "not given" is stored.
#[test]
fn translate_buffer_size_shows_no_misleading_default() {
    let out = tchseq().args(["translate", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let start = help.find("--buffer-size <").unwrap_or_else(|| panic!("{help}"));
    // the flag's entry: its lines up to the blank line before the next flag
    let entry: String = help[start..].lines().take_while(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("\n");
    assert!(entry.contains("default: the batch"), "{entry}");
    assert!(!entry.contains("[default: 0]"), "{entry}");
}

#[test]
fn version_flag_prints_the_crate_version() {
    let out = tchseq().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn usage_errors_exit_2_with_one_line_error() {
    let out = tchseq().arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error:"), "{err}");
}

#[test]
fn zero_threads_is_a_usage_error() {
    let out = crate::util::tchseq_bare().args(["--threads", "0", "doctor"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error:") && err.trim().lines().count() == 1, "{err}");
}

#[test]
fn closed_stdout_pipe_is_success() {
    use std::process::{Command, Stdio};
    // `tchseq doctor | (exit)`: the reader is gone before we write.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tchseq"))
        .arg("doctor")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn doctor_shows_whether_the_kernels_are_pinned() {
    let report = |reproducible: bool| -> serde_json::Value {
        let mut cmd = crate::util::tchseq_bare();
        cmd.env_remove("TCHSEQ_REPRODUCIBLE").env_remove("MKL_CBWR").env_remove("ATEN_CPU_CAPABILITY");
        if reproducible {
            cmd.arg("--reproducible");
        }
        let out = cmd.args(["doctor", "--json"]).output().unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (plain, pinned) = (report(false), report(true));
    assert_eq!(plain["reproducible"], false);
    assert_eq!(plain["MKL_CBWR"], serde_json::Value::Null);
    assert_eq!(pinned["reproducible"], true);
    assert_eq!(pinned["MKL_CBWR"], "AVX2,STRICT");
    assert_eq!(pinned["ATEN_CPU_CAPABILITY"], "avx2");
    assert!(pinned["cpu_vector_isa"].is_string());
}

/// As with fairseq's argparse, a flag given twice takes its last value, so scripts that append
/// to a base command line keep working; repeatable flags (`serve -m`) still collect every value.
#[test]
fn a_repeated_flag_takes_its_last_value_as_in_fairseq() {
    let out = crate::util::tchseq()
        .args(["translate", "--format", "text", "--format", "fairseq", "--beam", "2", "--beam", "1", "-m"])
        .arg(crate::util::repo("weights/multi30k.en-de"))
        .arg("A dog runs.")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("S-0\t"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("H-")).count(), 1);
}

#[test]
fn op_profile_counts_every_libtorch_op_of_a_translation() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("ops.tsv");
    let out = tchseq()
        .env("TCHSEQ_OP_PROFILE", &report)
        .args(["translate", "-m"])
        .arg(crate::util::repo("weights/multi30k.en-de"))
        .args(["--beam", "2", "--batch-size", "1"])
        .write_stdin("a man is sleeping .\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&report).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("op\tcalls\ttop_level_calls\ttotal_ns\tself_ns"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    let calls = |op: &str| -> u64 { rows.iter().find(|r| r[0] == op).map_or(0, |r| r[1].parse().unwrap()) };
    // one log-softmax per decoder step, at least two steps (a word and EOS), and matrix products
    assert!(calls("aten::log_softmax") >= 2, "{text}");
    assert!(calls("aten::addmm") + calls("aten::mm") > calls("aten::log_softmax"), "{text}");
    for r in &rows {
        let (total, own): (u64, u64) = (r[3].parse().unwrap(), r[4].parse().unwrap());
        assert!(own <= total && r[2].parse::<u64>().unwrap() <= r[1].parse::<u64>().unwrap(), "{r:?}");
    }
    assert!(!dir.path().join("ops.tsv.partial").exists());
}

/// `-m model.pt`, a bare file name in the current directory, finds the dictionaries beside it
/// (translate and verify), as `-m ./model.pt` does.
#[test]
fn a_bare_checkpoint_file_name_finds_its_dictionaries() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = crate::util::fixture("models/postnorm");
    for name in ["model.pt", "dict.src.txt", "dict.tgt.txt", "verify_left.pt"] {
        std::fs::copy(fixture.join(name), dir.path().join(name)).unwrap();
    }
    let translate = |model: &str| {
        crate::util::run_ok(tchseq().current_dir(dir.path()).args(["translate", "--tokenizer", "none", "--bpe", "none", "-m", model, "a t r"]))
    };
    let bare = translate("model.pt");
    assert!(!bare.trim().is_empty());
    assert_eq!(bare, translate("./model.pt"));
    let out = tchseq().current_dir(dir.path()).args(["verify", "-m", "model.pt", "--reference", "verify_left.pt"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
