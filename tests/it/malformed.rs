//! Broken and hostile checkpoints, generated here from the fixtures or from hand-built pickles:
//! every one must end in a one-line `error:` and exit code 2 through the CLI, never a panic,
//! and nothing in a pickle is ever executed.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use crate::util::{repo, tchseq};

fn fixture_dir(name: &str) -> PathBuf {
    repo("tests/fixtures/models").join(name)
}

fn postnorm_bytes() -> Vec<u8> {
    std::fs::read(fixture_dir("postnorm").join("model.pt")).expect("tests/fixtures/models/postnorm/model.pt")
}

fn legacy_bytes() -> Vec<u8> {
    std::fs::read(fixture_dir("postnorm-legacy").join("model.pt")).expect("tests/fixtures/models/postnorm-legacy/model.pt")
}

/// Runs `inspect` on `bytes` written as a checkpoint beside the postnorm dictionaries; asserts a
/// clean failure and returns the message.
fn expect_clean_error(case: &str, bytes: &[u8]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("model.pt");
    std::fs::write(&path, bytes).unwrap();
    inspect_error(case, &path, &fixture_dir("postnorm"))
}

fn inspect_error(case: &str, model: &Path, data: &Path) -> String {
    let out = tchseq()
        .args(["inspect", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "-s", "src", "-t", "tgt", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{case}: exit {:?}, stderr {stderr}", out.status.code());
    assert!(stderr.starts_with("error:") && stderr.trim_end().lines().count() == 1, "{case}: stderr {stderr:?}");
    assert!(!stderr.contains("panicked"), "{case}: {stderr}");
    assert!(out.stdout.is_empty(), "{case}: printed to stdout");
    stderr
}

/// A minimal pickle writer for hand-built cases.
struct P(Vec<u8>);

impl P {
    fn new() -> Self {
        P(vec![0x80, 2])
    }
    fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn s(mut self, text: &str) -> Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(text.len() as u32).to_le_bytes());
        self.0.extend_from_slice(text.as_bytes());
        self
    }
    fn global(mut self, module: &str, name: &str) -> Self {
        self.0.extend_from_slice(format!("c{module}\n{name}\n").as_bytes());
        self
    }
    fn int(mut self, v: i32) -> Self {
        self.0.push(b'J');
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn stop(mut self) -> Vec<u8> {
        self.0.push(b'.');
        self.0
    }
}

/// A torch-style zip: `archive/data.pkl` plus storage entries.
fn torch_zip(pickle: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("archive/data.pkl", opts).unwrap();
    w.write_all(pickle).unwrap();
    for (key, data) in storages {
        w.start_file(format!("archive/data/{key}"), opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.start_file("archive/version", opts).unwrap();
    w.write_all(b"3\n").unwrap();
    w.finish().unwrap().into_inner()
}

/// `{'model': {'w': <tensor of `storage_class` with `numel` elements, size `size`>}}`.
fn tensor_checkpoint(storage_class: &str, numel: i32, size: i32) -> Vec<u8> {
    P::new()
        .raw(b"}(")
        .s("args")
        .global("argparse", "Namespace")
        .raw(b")\x81}(")
        .s("arch")
        .s("transformer_tiny")
        .raw(b"ub")
        .s("model")
        .raw(b"}(")
        .s("w")
        .global("torch._utils", "_rebuild_tensor_v2")
        .raw(b"((")
        .s("storage")
        .global("torch", storage_class)
        .s("0")
        .s("cpu")
        .int(numel)
        .raw(b"tQ")
        .int(0)
        .int(size)
        .raw(b"\x85")
        .int(1)
        .raw(b"\x85\x89")
        .global("collections", "OrderedDict")
        .raw(b")RtRu")
        .raw(b"u")
        .stop()
}

/// Byte offset of the data of zip entry `name`.
fn entry_range(bytes: &[u8], suffix: &str) -> (usize, usize) {
    let mut a = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    for i in 0..a.len() {
        let f = a.by_index_raw(i).unwrap();
        if f.name().unwrap().ends_with(suffix) {
            let start = f.data_start().unwrap() as usize;
            return (start, start + f.compressed_size() as usize);
        }
    }
    panic!("no zip entry *{suffix}");
}

#[test]
fn truncated_and_corrupted_zip_checkpoints() {
    let good = postnorm_bytes();
    let mut msgs = Vec::new();
    msgs.push(expect_clean_error("empty file", &[]));
    for cut in [4, 100, good.len() / 2, good.len() - 30, good.len() - 1] {
        let m = expect_clean_error(&format!("zip truncated at {cut}"), &good[..cut]);
        assert!(m.contains(&format!("the file is truncated ({cut} bytes)")), "{m}");
        msgs.push(m);
    }
    let mut bad_magic = good.clone();
    bad_magic[..4].copy_from_slice(b"XXXX");
    msgs.push(expect_clean_error("bad magic", &bad_magic));

    let (start, end) = entry_range(&good, "data/0");
    let mut flipped = good.clone();
    flipped[(start + end) / 2] ^= 0x55;
    let m = expect_clean_error("flipped storage byte", &flipped);
    assert!(m.contains("CRC32"), "{m}");

    let (start, _) = entry_range(&good, "data.pkl");
    let mut flipped_pkl = good.clone();
    flipped_pkl[start + 20] ^= 0x01;
    let m = expect_clean_error("flipped data.pkl byte", &flipped_pkl);
    assert!(m.contains("CRC32") && m.contains("data.pkl"), "{m}");

    msgs.push(expect_clean_error("text file", b"hello, this is not a checkpoint\n"));
    let mut tar = vec![0u8; 1024];
    tar[257..262].copy_from_slice(b"ustar");
    tar[0] = b'x';
    let m = expect_clean_error("tar", &tar);
    assert!(m.contains("tar"), "{m}");
    for m in msgs {
        assert!(m.contains("model.pt"), "error does not name the file: {m}");
    }
}

#[test]
fn corrupted_legacy_checkpoints() {
    let good = legacy_bytes();
    // The storage table starts after the five pickles; its first entry is the u64 element
    // count of the first storage. Find it by parsing up to there with the library's reader.
    let raw = tchseq::checkpoint::container::read(&good).unwrap();
    let tchseq::checkpoint::container::StorageSource::Ranges { ranges } = &raw.storages else { panic!("not legacy") };
    let first = ranges.values().map(|r| r.0).min().unwrap() - 8;
    let mut table = good.clone();
    table[first + 3] ^= 0x40;
    let m = expect_clean_error("flipped legacy storage count", &table);
    assert!(m.contains("legacy storage table"), "{m}");
    let m = expect_clean_error("legacy truncated in the storages", &good[..good.len() - 100]);
    assert!(m.contains("storage"), "{m}");
    expect_clean_error("legacy truncated in the pickle", &good[..first / 2]);
    // Junk opcode at the start of the main object (after magic, protocol version, sys_info).
    let mut main_start = 0;
    for _ in 0..3 {
        main_start += tchseq::checkpoint::pickle::parse(&good[main_start..], main_start).unwrap().1;
    }
    let mut junk = good.clone();
    junk[main_start + 2] = 0xfe;
    let m = expect_clean_error("legacy pickle with a junk opcode", &junk);
    assert!(m.contains(&format!("unknown pickle opcode 0xfe at byte {}", main_start + 2)), "{m}");
}

/// A pickle that calls a function is refused by the function's name (the reader executes no
/// pickle at all: it builds only the classes it knows), or ignored where nothing needs it.
#[test]
fn hostile_pickles_are_refused_by_name() {
    let cmd = "touch /nonexistent/pwned";
    // os.system as `args`: the config needs it, so it is an error naming the class.
    let pkl = P::new().raw(b"}(").s("args").global("os", "system").s(cmd).raw(b"\x85R").s("model").raw(b"}u").stop();
    let m = expect_clean_error("os.system args", &torch_zip(&pkl, &[]));
    assert!(m.contains("os.system"), "{m}");
    // builtins.eval as a model tensor.
    let pkl = P::new()
        .raw(b"}(")
        .s("args")
        .global("argparse", "Namespace")
        .raw(b")\x81}(")
        .s("arch")
        .s("transformer_tiny")
        .raw(b"ub")
        .s("model")
        .raw(b"}(")
        .s("w")
        .global("builtins", "eval").s("__import__('os').system('x')").raw(b"\x85Ru").raw(b"u").stop();
    let m = expect_clean_error("builtins.eval tensor", &torch_zip(&pkl, &[]));
    assert!(m.contains("builtins.eval") && m.contains("not a tensor"), "{m}");

    // An opaque object the caller does not need is no error.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("d.pt");
    let pkl = P::new().raw(b"}(").s("junk").global("os", "system").s(cmd).raw(b"\x85R").raw(b"u").stop();
    std::fs::write(&path, torch_zip(&pkl, &[])).unwrap();
    assert!(tchseq::checkpoint::load_tensor_dict(&path).unwrap().is_empty());
}

#[test]
fn malformed_pickles_and_declarations() {
    let m = expect_clean_error("unknown opcode", &torch_zip(&P::new().raw(b"}\xfe").stop(), &[]));
    assert!(m.contains("unknown pickle opcode 0xfe at byte 3"), "{m}");
    let deep = P::new().raw(b"}(").s("args").raw(&[b']'; 200_000]).raw(&[b'a'; 199_999]).s("model").raw(b"}u").stop();
    let m = expect_clean_error("deep nesting", &torch_zip(&deep, &[]));
    assert!(m.contains("deeper"), "{m}");
    let m = expect_clean_error("memo get of a missing key", &torch_zip(&P::new().raw(b"j\xff\xff\xff\x7f").stop(), &[]));
    assert!(m.contains("memo"), "{m}");
    let m = expect_clean_error("missing model", &torch_zip(&P::new().raw(b"}(").s("args").raw(b"N").s("cfg").raw(b"Nu").stop(), &[]));
    assert!(m.contains("no `model` entry"), "{m}");
    let m = expect_clean_error("model is a list", &torch_zip(&P::new().raw(b"}(").s("model").raw(b"]u").stop(), &[]));
    assert!(m.contains("`model` is a list"), "{m}");
    let m = expect_clean_error("wrong dtype", &torch_zip(&tensor_checkpoint("ComplexFloatStorage", 4, 4), &[("0", &[0u8; 32])]));
    assert!(m.contains("ComplexFloatStorage"), "{m}");
    let m = expect_clean_error("huge declared storage", &torch_zip(&tensor_checkpoint("FloatStorage", i32::MAX, 4), &[("0", &[0u8; 16])]));
    assert!(m.contains("storage"), "{m}");
    let m = expect_clean_error("view beyond storage", &torch_zip(&tensor_checkpoint("FloatStorage", 4, 40), &[("0", &[0u8; 16])]));
    assert!(m.contains("exceeds its storage"), "{m}");
    let mut st = 1_000_000u64.to_le_bytes().to_vec();
    st.extend_from_slice(b"{\"x\":1}");
    let m = expect_clean_error("safetensors header beyond the file", &st);
    assert!(m.contains("header"), "{m}");
    let unsupported = P::new().raw(b"}(").s("args").global("argparse", "Namespace").raw(b")\x81}(").s("arch").s("lstm").raw(b"ub").s("model").raw(b"}u").stop();
    let m = expect_clean_error("unsupported arch", &torch_zip(&unsupported, &[]));
    assert!(m.contains("lstm"), "{m}");
}

#[test]
fn dictionaries_that_do_not_fit() {
    let model = fixture_dir("postnorm").join("model.pt");
    let tmp = tempfile::tempdir().unwrap();
    let m = inspect_error("missing dictionary", &model, tmp.path());
    assert!(m.contains("dict.src.txt"), "{m}");
    let src = std::fs::read_to_string(fixture_dir("postnorm").join("dict.src.txt")).unwrap();
    std::fs::write(tmp.path().join("dict.src.txt"), format!("{src}extra 1\n")).unwrap();
    std::fs::write(tmp.path().join("dict.tgt.txt"), &src).unwrap();
    let m = inspect_error("dictionary larger than the embeddings", &model, tmp.path());
    assert!(m.contains("rows"), "{m}");
    std::fs::write(tmp.path().join("dict.src.txt"), "a 1\nbroken-line\n").unwrap();
    let m = inspect_error("bad dictionary line", &model, tmp.path());
    assert!(m.contains("line 2"), "{m}");
    let m = inspect_error("directory without a checkpoint", tmp.path(), tmp.path());
    assert!(m.contains("model.pt"), "{m}");
}

/// `_rebuild_tensor_v2` of storage `key` (`class`, `numel` elements) viewed as `size`/`stride`.
fn tensor_pickle(p: P, class: &str, key: &str, numel: i32, size: &[i32], stride: &[i32]) -> P {
    let mut p = p.global("torch._utils", "_rebuild_tensor_v2").raw(b"((").s("storage").global("torch", class).s(key).s("cpu").int(numel).raw(b"tQ").int(0).raw(b"(");
    for &d in size {
        p = p.int(d);
    }
    p = p.raw(b"t(");
    for &d in stride {
        p = p.int(d);
    }
    p.raw(b"t\x89").global("collections", "OrderedDict").raw(b")RtR")
}

/// `{'x': <nested tensor of 6 floats 0..6 with per-component sizes, strides and offsets>}`,
/// as torch.save writes one, read by `read_tensor_dict`.
fn read_nested(sizes: &[[i64; 2]], strides: &[[i64; 2]], offsets: &[i64]) -> Result<tchseq::checkpoint::TensorDict, String> {
    let b = sizes.len() as i32;
    let mut p = P::new().raw(b"}(").s("x").global("torch._utils", "_rebuild_nested_tensor").raw(b"(");
    p = tensor_pickle(p, "FloatStorage", "0", 6, &[6], &[1]);
    p = tensor_pickle(p, "LongStorage", "1", 2 * b, &[b, 2], &[2, 1]);
    p = tensor_pickle(p, "LongStorage", "2", 2 * b, &[b, 2], &[2, 1]);
    let n = offsets.len() as i32;
    p = tensor_pickle(p, "LongStorage", "3", n, &[n], &[1]);
    let pkl = p.raw(b"tRu").stop();
    let floats: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let longs = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let (s, st, o) = (longs(&sizes.concat()), longs(&strides.concat()), longs(offsets));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("nested.pt");
    std::fs::write(&path, torch_zip(&pkl, &[("0", &floats), ("1", &s), ("2", &st), ("3", &o)])).unwrap();
    tchseq::checkpoint::read_tensor_dict(&path).map_err(|e| e.to_string())
}

#[test]
fn nested_tensors_are_padded_and_hostile_ones_refused() {
    // [[0, 1], [2, 3]] and [[4, 5]] padded to [2, 2, 2]
    let read = read_nested(&[[2, 2], [1, 2]], &[[2, 1], [2, 1]], &[0, 4]).unwrap();
    assert_eq!(read.nested, ["x"]);
    let x = &read.tensors["x"];
    assert_eq!(x.size(), [2, 2, 2]);
    assert_eq!(Vec::<f32>::try_from(&x.flatten(0, -1)).unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]);
    for (case, sizes, strides, offsets, wanted) in [
        ("past the buffer", vec![[2, 2], [2, 2]], vec![[2, 1], [2, 1]], vec![0, 4], "exceeds its storage"),
        ("negative stride", vec![[2, 2]], vec![[-2, 1]], vec![0], "negative"),
        ("offsets missing", vec![[1, 2], [1, 2]], vec![[2, 1], [2, 1]], vec![0], "do not describe one batch"),
        ("a huge padded box", vec![[1_000_000, 0], [0, 1_000_000]], vec![[1, 1], [1, 1]], vec![0, 0], "would exceed"),
    ] {
        let err = read_nested(&sizes, &strides, &offsets).err().unwrap_or_else(|| panic!("{case}: read"));
        assert!(err.contains("tensor x: nested tensor") && err.contains(wanted), "{case}: {err}");
    }
}

/// Loads `bytes` as a checkpoint through the library, in this process: an error must be one
/// line, and nothing may panic.
fn load_bytes(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let result = std::panic::catch_unwind(|| tchseq::checkpoint::load_checkpoint(&path).map(|_| ()).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&path);
    let result = result.unwrap_or_else(|_| panic!("{name}: loading panicked"));
    if let Err(e) = &result {
        assert!(!e.contains('\n'), "{name}: a multi-line error: {e}");
        assert!(!e.is_empty(), "{name}: an empty error");
    }
    result
}

/// `n` copies of `good`, each with one bit flipped at a fixed pseudo-random walk (xorshift) over
/// the file: `(offset, bytes)`.
fn flipped(good: &[u8], n: usize, seed: u64) -> impl Iterator<Item = (usize, Vec<u8>)> + '_ {
    let mut state = seed;
    (0..n).map(move |i| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let at = (state % good.len() as u64) as usize;
        let mut bad = good.to_vec();
        bad[at] ^= 1 << (i % 8);
        (at, bad)
    })
}

#[test]
fn every_4k_truncation_and_hundreds_of_flipped_bytes_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, good) in [("zip", postnorm_bytes()), ("legacy", legacy_bytes())] {
        let mut cuts = 0;
        for cut in (0..good.len()).step_by(4096) {
            assert!(load_bytes(tmp.path(), &format!("{name}-cut-{cut}.pt"), &good[..cut]).is_err(), "{name} cut at {cut} loaded");
            cuts += 1;
        }
        assert!(cuts > 40, "{cuts} truncations of {name}");
        let mut failed = 0;
        for (at, bad) in flipped(&good, 200, 0x9e37_79b9_7f4a_7c15) {
            // a flip in a field nobody reads (a zip timestamp, padding) may load; nothing may panic
            failed += usize::from(load_bytes(tmp.path(), &format!("{name}-flip-{at}.pt"), &bad).is_err());
        }
        // the zip container checks every entry's CRC-32; legacy files carry raw weights without one
        if name == "zip" {
            assert!(failed > 150, "{name}: only {failed} of 200 flipped bytes were caught");
        }
    }
}

/// The same damage through the CLI: every 4 KiB truncation of both fixtures is exit 2 with one
/// `error:` line, and single flipped bytes are either that or a clean load (never a panic,
/// a signal or a multi-line error).
#[test]
fn damaged_checkpoints_through_the_cli_are_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = 0;
    for (name, good) in [("zip", postnorm_bytes()), ("legacy", legacy_bytes())] {
        for cut in (0..good.len()).step_by(4096) {
            expect_clean_error(&format!("{name} cut at {cut}"), &good[..cut]);
            runs += 1;
        }
        for (at, bad) in flipped(&good, 24, 0x2545_f491_4f6c_dd1d) {
            let path = tmp.path().join("model.pt");
            std::fs::write(&path, &bad).unwrap();
            let data = fixture_dir("postnorm");
            let out = tchseq()
                .args(["inspect", "--model", path.to_str().unwrap(), "--data", data.to_str().unwrap(), "-s", "src", "-t", "tgt", "--json"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => {}
                Some(2) => assert!(stderr.starts_with("error:") && stderr.trim_end().lines().count() == 1, "{name} flip at {at}: {stderr:?}"),
                other => panic!("{name} flip at {at}: exit {other:?}, {stderr}"),
            }
            runs += 1;
        }
    }
    assert!(runs > 150, "{runs} damaged checkpoints");
}

const LFS_POINTER: &str = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1034\n";

/// A copy of `tests/fixtures/<fixture>` in a temporary directory, `damage` done to it.
fn broken_copy(fixture: &str, damage: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(repo("tests/fixtures").join(fixture)).unwrap() {
        let f = f.unwrap();
        if f.path().is_file() {
            std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
        }
    }
    damage(dir.path());
    dir
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{}: no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// `translate` and `inspect` of a broken model directory: one `error:` line naming every `want`.
fn dir_error(case: &str, dir: &Path, want: &[&str]) {
    for args in [&["translate", "-s", "en", "-t", "de", "Hello"][..], &["inspect", "-s", "en", "-t", "de"]] {
        let out = tchseq().arg(args[0]).arg("-m").arg(dir).args(&args[1..]).output().unwrap();
        let line = crate::util::one_line_error(&out, want[0]);
        for w in want {
            assert!(line.contains(w), "{case} ({}): {w:?} not in {line}", args[0]);
        }
        assert!(!line.contains("no model.pt"), "{case}: {line}");
    }
}

/// A Hugging Face directory copied without a file, with a broken `config.json`, or with Git LFS
/// pointers in place of its files: the error names the cause, never fairseq's "no model.pt".
#[test]
fn a_broken_hugging_face_directory_names_the_cause() {
    let rm = |f: &'static str| move |d: &Path| std::fs::remove_file(d.join(f)).unwrap();
    let name = |d: &tempfile::TempDir| d.path().display().to_string();

    let d = broken_copy("hf/m2m", rm("vocab.json"));
    dir_error("vocab.json", d.path(), &["no vocab.json, which M2M100Tokenizer needs", &name(&d)]);
    let d = broken_copy("hf/m2m", rm("sentencepiece.bpe.model"));
    dir_error("sentencepiece", d.path(), &["no sentencepiece.bpe.model", &name(&d)]);
    let d = broken_copy("hf/random-nllb", rm("sentencepiece.bpe.model"));
    dir_error("nllb sentencepiece", d.path(), &["no sentencepiece.bpe.model", &name(&d)]);
    for f in ["merges.txt", "vocab-tgt.json"] {
        let d = broken_copy("hf/fsmt-postnorm", rm(f));
        dir_error(f, d.path(), &[&format!("no {f}, which FSMTTokenizer needs"), &name(&d)]);
    }

    let d = broken_copy("hf/m2m", |d| edit(&d.join("config.json"), "\"d_model\":", "\"d_model\"  "));
    dir_error("bad json", d.path(), &["config.json: not a valid transformers config", "line "]);
    let d = broken_copy("hf/m2m", |d| edit(&d.join("config.json"), "\"d_model\":", "\"width\":"));
    dir_error("missing field", d.path(), &["config.json: not a valid transformers config: missing field `d_model`", "line "]);
    let d = broken_copy("hf/m2m", |d| edit(&d.join("config.json"), "\"model_type\": \"m2m_100\"", "\"model_type\": \"marian\""));
    dir_error("model_type", d.path(), &["model_type \"marian\" is not a model tchseq reads (it reads m2m_100, fsmt)"]);

    let d = broken_copy("hf/m2m", rm("model.safetensors"));
    dir_error("no weights", d.path(), &["no weights: looked for model.safetensors and pytorch_model.bin", &name(&d)]);
    let d = broken_copy("hf/m2m", |d| {
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::write(d.join("model.safetensors.index.json"), "{\"weight_map\": {}}").unwrap();
    });
    dir_error("sharded", d.path(), &["model.safetensors.index.json: sharded weights"]);

    let d = broken_copy("hf/m2m", |d| std::fs::write(d.join("model.safetensors"), LFS_POINTER).unwrap());
    dir_error("lfs weights", d.path(), &["model.safetensors is a Git LFS pointer, not the weights: run `git lfs pull`"]);
    let d = broken_copy("hf/m2m", |d| std::fs::write(d.join("sentencepiece.bpe.model"), LFS_POINTER).unwrap());
    dir_error("lfs spm", d.path(), &["sentencepiece.bpe.model is a Git LFS pointer, not the sentencepiece model: run `git lfs pull`"]);

    // the weights file named itself reads the directory the same way
    let d = broken_copy("hf/m2m", |d| edit(&d.join("config.json"), "\"model_type\": \"m2m_100\"", "\"model_type\": \"marian\""));
    dir_error("weights file", &d.path().join("model.safetensors"), &["model_type \"marian\""]);
}

/// A Git LFS pointer in place of a fairseq checkpoint or of a CTranslate2 `model.bin`.
#[test]
fn a_git_lfs_pointer_is_named_as_one() {
    let out = |d: &Path| tchseq().args(["inspect", "-m"]).arg(d).output().unwrap();
    let d = broken_copy("models/postnorm", |d| std::fs::write(d.join("model.pt"), LFS_POINTER).unwrap());
    crate::util::one_line_error(&out(d.path()), "model.pt is a Git LFS pointer, not the weights: run `git lfs pull`");

    let d = broken_copy("ct2/postnorm-float32", |d| std::fs::write(d.join("model.bin"), LFS_POINTER).unwrap());
    let model = repo("tests/fixtures/models/postnorm");
    let out = tchseq().args(["verify", "-m"]).arg(model).arg("--against").arg(d.path()).output().unwrap();
    crate::util::one_line_error(&out, "model.bin is a Git LFS pointer, not the weights: run `git lfs pull`");
}
