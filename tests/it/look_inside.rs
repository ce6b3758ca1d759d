//! Attention heatmaps, positional-embedding plots and alignments: the numbers against fairseq
//! 0.12.2's goldens (verify_{left,right}.pt `attn`, `--print-alignment` A- lines), the images
//! for well-formedness and size.

use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};
use tchseq::checkpoint::{load_checkpoint, load_tensor_dict};
use tchseq::model::TransformerModel;
use tchseq::plot::capture::{alignment_attention, capture_attention};
use tchseq::plot::positions::{positional_table, Side};

use crate::util::fairseq_out::{compare_settled, fixture_model_args, parse_fairseq, Rule};
use crate::util::tolerance::{ACTIVATION, SAME_RUN_F32};
use crate::util::{fixture, repo, tchseq};

struct Fixture {
    name: String,
    dir: PathBuf,
    learned_pos: bool,
}

fn fixtures() -> Vec<Fixture> {
    let m = crate::util::json("tests/fixtures/models/manifest.json");
    let list = m["fixtures"].as_array().expect("fixtures list");
    assert!(!list.is_empty());
    list.iter()
        .map(|f| Fixture {
            name: f["name"].as_str().expect("name").to_string(),
            dir: repo(f["dir"].as_str().expect("dir")),
            learned_pos: f["model"]["encoder_learned_pos"].as_bool().expect("encoder_learned_pos"),
        })
        .collect()
}

fn model(dir: &Path) -> TransformerModel {
    let ckpt = load_checkpoint(&dir.join("model.pt")).expect("checkpoint");
    TransformerModel::from_state_dict(&ckpt.config, &ckpt.state_dict, Device::Cpu, Kind::Float).expect("model").0
}


#[test]
fn head_mean_of_the_last_cross_attention_equals_fairseq_attn() {
    let mut checked = 0;
    let mut worst = 0f64;
    for fx in fixtures() {
        let m = model(&fx.dir);
        for side in ["left", "right"] {
            let golden = load_tensor_dict(&fx.dir.join(format!("verify_{side}.pt"))).expect("verify golden");
            let maps = capture_attention(&m, &golden["src_tokens"], &golden["prev_output_tokens"]).expect("capture");
            let ours = alignment_attention(&maps).expect("attn");
            let d = crate::util::max_abs(&ours, &golden["attn"]);
            assert!(ACTIVATION.holds(d), "{} {side}: max |attn - fairseq| = {d:e}", fx.name);
            worst = worst.max(d);

            let layers = m.decoder.layers.len();
            assert_eq!(maps.cross.len(), layers);
            assert_eq!(maps.decoder_self.len(), layers);
            assert_eq!(maps.encoder_self.len(), m.encoder.layers.len());
            let (b, t) = golden["prev_output_tokens"].size2().unwrap();
            let s = golden["src_tokens"].size()[1];
            let heads = m.decoder.layers[0].encoder_attn.as_ref().unwrap().num_heads;
            for w in &maps.cross {
                assert_eq!(w.size(), [heads, b, t, s]);
            }
            // probabilities: rows sum to one; pad keys and future positions get exactly zero
            for w in maps.cross.iter().chain(&maps.decoder_self).chain(&maps.encoder_self) {
                let sums = w.sum_dim_intlist(-1, false, Kind::Double);
                let d = sums.f_sub_scalar(1.0).unwrap().abs().max().double_value(&[]);
                assert!(SAME_RUN_F32.holds(d), "{} {side}: a row sums to 1 {d:+e}", fx.name);
            }
            let src_pad = golden["src_tokens"].eq(1).view([1, b, 1, s]);
            for w in &maps.cross {
                let at_pad = w.masked_select(&src_pad.expand_as(w));
                assert_eq!(at_pad.abs().max().double_value(&[]), 0.0, "{} {side}: attention on source padding", fx.name);
            }
            let future = Tensor::ones([t, t], (Kind::Bool, Device::Cpu)).triu(1);
            for w in &maps.decoder_self {
                let ahead = w.masked_select(&future.view([1, 1, t, t]).expand_as(w));
                assert_eq!(ahead.abs().max().double_value(&[]), 0.0, "{}: decoder self-attention looks ahead", fx.name);
            }
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} goldens checked");
    eprintln!("attn: {checked} goldens, max |diff| {worst:e}");
}

#[test]
fn positions_plot_data_equals_the_positions_fairseq_added() {
    // Sinusoidal: fairseq's encoder_states.0 is embed_scale * embed_tokens + embed_positions
    // (those fixtures have no layernorm_embedding), and right padding puts row b's positions at
    // 0..len_b. Learned: fairseq's own encoder.embed_positions.weight (weights.pt), rows from
    // padding_idx + 1.
    let (mut sinusoidal, mut learned_checked) = (0, 0);
    for fx in fixtures() {
        let m = model(&fx.dir);
        let golden = load_tensor_dict(&fx.dir.join("verify_right.pt")).expect("verify golden");
        let lengths = Vec::<i64>::try_from(&golden["src_lengths"]).unwrap();
        let longest = *lengths.iter().max().unwrap();
        let (table, learned) = positional_table(&m, Side::Encoder, longest as usize).expect("table");
        assert_eq!(learned, fx.learned_pos, "{}", fx.name);
        assert_eq!(table.len() as i64, longest);
        if learned {
            let weights = load_tensor_dict(&fx.dir.join("weights.pt")).expect("weights golden");
            let theirs = weights["encoder.embed_positions.weight"].narrow(0, 2, longest);
            let d = crate::util::max_abs(&Tensor::from_slice2(&table), &theirs);
            assert!(ACTIVATION.holds(d), "{}: max |positions - fairseq| = {d:e}", fx.name);
            learned_checked += 1;
            continue;
        }
        let x = golden["encoder_states.0"].transpose(0, 1); // [B,S,C]
        let pos = x.f_sub(&golden["encoder_embedding"]).unwrap();
        for (b, &len) in lengths.iter().enumerate() {
            let ours = Tensor::from_slice2(&table[..len as usize]);
            let theirs = pos.get(b as i64).narrow(0, 0, len);
            let d = crate::util::max_abs(&ours, &theirs);
            assert!(ACTIVATION.holds(d), "{} row {b}: max |positions - fairseq| = {d:e}", fx.name);
        }
        sinusoidal += 1;
    }
    assert!(sinusoidal > 0 && learned_checked > 0, "{sinusoidal} sinusoidal, {learned_checked} learned");
}

/// fairseq output lines without timings (`W-`) and scores (`P-`, the score field of `H-`/`D-`;
/// score parity is the translate tests' business): S- lines, hypotheses, A- lines.
fn comparable(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("W-") && !l.starts_with("P-"))
        .map(|l| {
            if l.starts_with("H-") || l.starts_with("D-") {
                let f: Vec<&str> = l.splitn(3, '\t').collect();
                format!("{}\t{}", f[0], f.get(2).unwrap_or(&""))
            } else {
                l.to_string()
            }
        })
        .collect()
}

#[test]
fn print_alignment_matches_fairseq_interactive() {
    let mut checked = 0;
    for fx in fixtures() {
        let golden = fx.dir.join("interactive/beam5_align.txt");
        let want = std::fs::read_to_string(&golden).expect("alignment golden (reference/alignment_goldens.sh)");
        let out = tchseq()
            .args(["--device", "cpu", "translate", "-m"])
            .arg(&fx.dir)
            .args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", "fairseq"])
            .args(["--beam", "5", "--buffer-size", "1024", "--batch-size", "16", "--print-alignment", "--input"])
            .arg(fixture("models/inputs.src"))
            .output()
            .expect("run");
        assert!(out.status.success(), "{}: {}", fx.name, String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        // hypotheses by the near-tie rule; the A- lines of every other sentence exactly
        let c = compare_settled(&parse_fairseq(&want), &parse_fairseq(&stdout), &fixture_model_args(&fx.dir), &Rule::beam(1.0));
        c.assert_ok(&fx.name);
        let a_lines = |text: &str| -> Vec<String> {
            comparable(text)
                .into_iter()
                .filter(|l| l.strip_prefix("A-").and_then(|r| r.split('\t').next()?.parse::<usize>().ok()).is_some_and(|id| !c.near_tie_ids.contains(&id)))
                .collect()
        };
        let (got_a, want_a) = (a_lines(&stdout), a_lines(&want));
        assert_eq!(want_a.len() + c.near_tie_ids.len(), 72, "{}: an A- line per sentence", fx.name);
        assert_eq!(got_a, want_a, "{}: A- lines differ from fairseq", fx.name);
        checked += want_a.len() + c.near_tie_ids.len();
    }
    assert_eq!(checked, 6 * 72, "sentences whose A- line was compared or whose hypothesis is a proven near-tie");
    eprintln!("{checked} A- lines equal fairseq's");
}

#[test]
fn jsonl_gives_the_soft_attention_behind_the_alignment() {
    let fx = &fixtures()[0];
    let input = tempfile::NamedTempFile::new().unwrap();
    // a long and a short line in one batch: the short one is left-padded
    std::fs::write(input.path(), "h b j 3 x c q u g b s n\na t r\n").unwrap();
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(&fx.dir)
        .args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", "jsonl"])
        .args(["--buffer-size", "2", "--batch-size", "2", "--print-alignment", "--input"])
        .arg(input.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    for line in &lines {
        let src: Vec<&str> = line["source_tokens"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let h = &line["hypotheses"][0];
        let attn = &h["attention"];
        let source: Vec<&str> = attn["source"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let target: Vec<&str> = attn["target"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(&source[..source.len() - 1], src.as_slice());
        assert_eq!(source.last(), Some(&"</s>"));
        assert_eq!(target.last(), Some(&"</s>"));
        let tokens: Vec<&str> = h["tokens"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(&target[..target.len() - 1], tokens.as_slice());
        let weights: Vec<Vec<f64>> = serde_json::from_value(attn["weights"].clone()).unwrap();
        assert_eq!(weights.len(), target.len());
        for row in &weights {
            assert_eq!(row.len(), source.len());
            let sum: f64 = row.iter().sum();
            assert!(SAME_RUN_F32.holds((sum - 1.0).abs()), "row sums to {sum}");
        }
        // the hard alignment is the argmax over the source words of each target word's row
        let pairs: Vec<(usize, usize)> = serde_json::from_value(h["alignment"].clone()).unwrap();
        assert_eq!(pairs.len(), tokens.len());
        for (s, t) in pairs {
            let row = &weights[t][..source.len() - 1];
            let best = (0..row.len()).fold(0, |b, j| if row[j] > row[b] { j } else { b });
            assert_eq!(s, best);
        }
    }
}

fn attention_cmd(dir: &Path, sentence: &str, output: &Path, extra: &[&str]) -> std::process::Output {
    tchseq()
        .args(["attention", "-m"])
        .arg(dir)
        .args(["-s", "src", "-t", "tgt", sentence, "--output"])
        .arg(output)
        .args(extra)
        .output()
        .unwrap()
}

/// Parses an SVG file and returns (width, height, text contents).
fn svg(path: &Path) -> (f64, f64, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let dim = |a: &str| root.attribute(a).and_then(|v| v.trim_end_matches("px").parse::<f64>().ok()).unwrap();
    let texts = root.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).map(|t| t.trim().to_string()).collect();
    (dim("width"), dim("height"), texts)
}

#[test]
fn attention_svg_is_labelled_and_grows_with_the_sentence() {
    let fx = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    let (short, long) = (tmp.path().join("short.svg"), tmp.path().join("long.svg"));
    let out = attention_cmd(&fx.dir, "a t r", &short, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = attention_cmd(&fx.dir, "t u n a e n x 3 g g a e f t g 0 b", &long, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (w1, h1, texts) = svg(&short);
    let (w2, h2, _) = svg(&long);
    assert!(w2 > w1 && h2 > h1, "{w1}x{h1} vs {w2}x{h2}");
    for label in ["a", "t", "r", "</s>", "source", "attention weight"] {
        assert!(texts.iter().any(|t| t == label), "no label {label:?} in {texts:?}");
    }
    // teacher forcing: the given target labels the rows
    let forced = tmp.path().join("forced.svg");
    let out = attention_cmd(&fx.dir, "a t r", &forced, &["--target", "f z 0", "--grid", "--kind", "decoder-self"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("f z 0\n"));
    let (_, _, texts) = svg(&forced);
    for label in ["f", "z", "0", "head 0", "head 3", "mean of 4 heads"] {
        assert!(texts.iter().any(|t| t == label), "no label {label:?} in {texts:?}");
    }
}

#[test]
fn attention_png_is_a_labelled_picture() {
    let fx = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    let png = tmp.path().join("a.png");
    let out = attention_cmd(&fx.dir, "a t r", &png, &["--kind", "encoder-self", "--layer", "0", "--head", "1"]);
    // `make test` installs DejaVu Sans (fonts-dejavu-core) where it is missing
    assert!(
        out.status.success(),
        "the PNG needs a system TrueType font (DejaVu Sans or Liberation Sans; Debian: apt install fonts-dejavu-core): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    let (w, h) = (u32::from_be_bytes(bytes[16..20].try_into().unwrap()), u32::from_be_bytes(bytes[20..24].try_into().unwrap()));
    assert!(w > 100 && h > 100, "{w}x{h}");
    let bogus = tmp.path().join("bogus.ttf");
    std::fs::write(&bogus, b"not a font").unwrap();
    let out = attention_cmd(&fx.dir, "a t r", &tmp.path().join("b.png"), &["--font", bogus.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus.ttf"), "{out:?}");
}

#[test]
fn attention_bad_options_are_one_line_errors() {
    let fx = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 5] = [
        ("x.jpg", &[], ".svg or .png"),
        ("x.svg", &["--layer", "7"], "--layer 7"),
        ("x.svg", &["--head", "4"], "--head 4"),
        ("x.svg", &["--head", "first"], "--head"),
        ("x.svg", &["--grid", "--head", "0"], "--grid"),
    ];
    for (file, extra, needle) in cases {
        let out = attention_cmd(&fx.dir, "a t r", &tmp.path().join(file), extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:") && err.trim_end().lines().count() == 1 && err.contains(needle), "{extra:?}: {err}");
        assert!(!tmp.path().join(file).exists());
    }
}

#[test]
fn positions_svg_is_valid_and_sized_by_length() {
    let fx = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    let mut sizes = Vec::new();
    for len in [10, 60] {
        let path = tmp.path().join(format!("pe{len}.svg"));
        let out = tchseq()
            .args(["positions", "-m"])
            .arg(&fx.dir)
            .args(["-s", "src", "-t", "tgt", "--length", &len.to_string(), "--output"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (w, h, texts) = svg(&path);
        assert!(texts.iter().any(|t| t.contains("sinusoidal positional embeddings")), "{texts:?}");
        assert!(texts.iter().any(|t| t == "position") && texts.iter().any(|t| t == "dimension"));
        sizes.push((w, h));
    }
    assert!(sizes[1].1 > sizes[0].1, "{sizes:?}");
    let out = tchseq()
        .args(["positions", "-m"])
        .arg(&fx.dir)
        .args(["-s", "src", "-t", "tgt", "--length", "0", "--output"])
        .arg(tmp.path().join("x.svg"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
