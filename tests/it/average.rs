//! `tchseq average` against fairseq 0.12.2's scripts/average_checkpoints.py: every averaged
//! tensor's bytes equal the script's (tests/fixtures/average/goldens.json, made by
//! reference/average_goldens.sh, which also loads our output in torch and fairseq live), the
//! output reads back in our own loader, and bad input ends in one error line.

use std::path::{Path, PathBuf};

use tchseq::checkpoint::container;
use tchseq::checkpoint::pickle::{Node, Value};

use crate::util::sha256::sha256_hex;
use crate::util::{fixture, one_line_error, tchseq};

fn expand(arg: &str, scratch: &Path) -> String {
    arg.replace("{M}", &fixture("models").display().to_string())
        .replace("{A}", &fixture("average").display().to_string())
        .replace("{D}", &scratch.display().to_string())
}

/// `model`'s tensors of a checkpoint we wrote: (name, dtype, shape, SHA-256 of the bytes), each
/// checked to be a whole contiguous storage of its own; and the top-level keys.
fn averaged_tensors(path: &Path) -> (Vec<String>, Vec<(String, String, Vec<i64>, String)>) {
    let bytes = std::fs::read(path).unwrap();
    let raw = container::read(&bytes).unwrap();
    let p = &raw.pickle;
    let root = p.dict(&p.root).unwrap();
    let keys = root.entries.iter().map(|(k, _)| match k {
        Value::Str(s) => s.to_string(),
        other => panic!("{other:?}"),
    });
    let model = p.dict(root.get("model").unwrap()).unwrap();
    assert_eq!(model.class.as_ref().map(|c| &*c.name), Some("collections.OrderedDict"));
    let mut storages = std::collections::HashSet::new();
    let tensors = model
        .entries
        .iter()
        .map(|(k, v)| {
            let Value::Str(name) = k else { panic!("{k:?}") };
            let Some(Node::Tensor(t)) = p.node(v) else { panic!("{name}") };
            let Some(Node::Storage(s)) = p.nodes.get(t.storage) else { panic!("{name}") };
            assert!(storages.insert(s.key.clone()), "{name} shares a storage");
            let numel: i64 = t.size.iter().product();
            assert_eq!((t.storage_offset, numel as u64), (0, s.numel), "{name}");
            let data = raw.storage_bytes(&bytes, s).unwrap();
            (name.to_string(), s.dtype.torch_name().to_string(), t.size.clone(), sha256_hex(&data))
        })
        .collect();
    (keys.collect(), tensors)
}

#[test]
fn averaged_tensors_equal_fairseqs_bit_for_bit() {
    let goldens = crate::util::json_at(&fixture("average/goldens.json"));
    let mut compared = 0;
    for case in goldens["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        for (link, target) in case["links"].as_object().unwrap() {
            std::os::unix::fs::symlink(expand(target.as_str().unwrap(), scratch.path()), scratch.path().join(link)).unwrap();
        }
        let out = tempfile::tempdir().unwrap();
        let output = out.path().join("averaged.pt");
        let args: Vec<String> = case["args"].as_array().unwrap().iter().map(|a| expand(a.as_str().unwrap(), scratch.path())).collect();
        let run = tchseq().arg("average").args(&args).arg("--output").arg(&output).output().unwrap();
        assert!(run.status.success(), "{name}: {run:?}");
        let (keys, tensors) = averaged_tensors(&output);
        let want_keys: Vec<String> = case["top_keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect();
        assert_eq!(keys, want_keys, "{name}");
        let want = case["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), want.len(), "{name}");
        for ((n, dtype, shape, sha), w) in tensors.iter().zip(want) {
            let shape_w: Vec<i64> = w["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
            assert_eq!((n.as_str(), dtype.as_str(), shape), (w["name"].as_str().unwrap(), w["dtype"].as_str().unwrap(), &shape_w), "{name}");
            assert_eq!(sha, w["sha256"].as_str().unwrap(), "{name}: {n}");
            compared += 1;
        }
        if name != "synthetic" {
            let ckpt = tchseq::checkpoint::load_checkpoint(&output).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!ckpt.state_dict.is_empty());
        }
        assert!(!out.path().join("averaged.pt.partial").exists());
    }
    assert_eq!(compared, 911);
}

fn fails(args: &[&str], output: &Path, contains: &str) {
    let out = tchseq().arg("average").args(args).arg("--output").arg(output).output().unwrap();
    one_line_error(&out, contains);
    assert!(!output.exists(), "{contains}: {} was written", output.display());
    let mut partial = output.as_os_str().to_owned();
    partial.push(".partial");
    assert!(!PathBuf::from(partial).exists(), "{contains}: a .partial file is left");
}

#[test]
fn bad_input_is_one_error_line() {
    let m = |rel: &str| fixture("models").join(rel).display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pt");
    fails(&[], &out, "no checkpoints to average");
    fails(&["--inputs", &m("postnorm/missing.pt")], &out, "missing.pt");
    fails(&["--inputs", &m("postnorm/model.pt"), &m("prenorm/model.pt")], &out, "does not hold the parameters of");
    fails(&["--inputs", &m("postnorm/model.pt"), "--num-epoch-checkpoints", "2"], &out, "not a directory");
    fails(&["--inputs", &m("postnorm"), &m("prenorm"), "--num-update-checkpoints", "2"], &out, "takes one directory");
    fails(&["--inputs", &m("postnorm/model.pt"), "--checkpoint-upper-bound", "3"], &out, "--checkpoint-upper-bound requires");
    let ckpts = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(m("postnorm/model.pt"), ckpts.path().join("checkpoint1.pt")).unwrap();
    std::os::unix::fs::symlink(m("postnorm/model.pt"), ckpts.path().join("checkpoint_last.pt")).unwrap();
    let d = ckpts.path().display().to_string();
    fails(&["--inputs", &d, "--num-epoch-checkpoints", "3"], &out, "found 1 checkpoint files");
    fails(&["--inputs", &d, "--num-epoch-checkpoints", "1", "--checkpoint-upper-bound", "0"], &out, "found 0 checkpoint files");
    fails(&["--inputs", &m("postnorm/model.pt")], &dir.path().join("missing/out.pt"), "missing/out.pt.partial");
    fails(&["--inputs", &m("postnorm/dict.src.txt")], &out, "dict.src.txt");
}
