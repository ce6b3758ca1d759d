//! The committed CTranslate2 4.8.5 conversions (`tests/fixtures/ct2/`, `reference/ct2_convert.sh`)
//! against the fairseq checkpoints they were made from, and corrupted copies of them.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use tch::{Device, Kind, Tensor};

use super::model_bin::{self, DataType, ModelBinError, MAX_RANK};
use super::*;
use crate::checkpoint::{load_checkpoint, upgrade, Checkpoint};
use crate::config::TransformerConfig;
use crate::model::TransformerModel;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ct2_dir(name: &str) -> PathBuf {
    root().join("tests/fixtures/ct2").join(name)
}

/// `manifest.json` -> conversions: the fixture directory and the `--model_path` it came from.
fn conversions() -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string(root().join("tests/fixtures/ct2/manifest.json")).unwrap();
    let manifest: Json = serde_json::from_str(&text).unwrap();
    let conversions = manifest["conversions"].as_object().unwrap();
    let out: Vec<_> = conversions
        .iter()
        .map(|(name, argv)| {
            let argv: Vec<&str> = argv.as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
            let i = argv.iter().position(|a| *a == "--model_path").unwrap();
            (name.clone(), root().join(argv[i + 1]))
        })
        .collect();
    assert_eq!(out.len(), 8, "{out:?}");
    out
}

/// What fairseq's state dict has and a conversion cannot: derived entries.
fn derived(key: &str) -> bool {
    key.ends_with(".version") || key.ends_with(".embed_positions._float_tensor") || upgrade::is_derived_copy(key)
}

fn bits(t: &Tensor) -> Tensor {
    t.contiguous().view_dtype(Kind::Int)
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.kind() == Kind::Float && b.kind() == Kind::Float && a.size() == b.size() && bits(a).equal(&bits(b))
}

fn max_abs(t: &Tensor) -> f64 {
    if t.numel() == 0 {
        0.0
    } else {
        t.abs().max().double_value(&[])
    }
}

struct Pair {
    name: String,
    ct2: Ct2Model,
    ckpt: Checkpoint,
}

fn pairs(suffix: &str) -> Vec<Pair> {
    conversions()
        .into_iter()
        .filter(|(name, _)| name.ends_with(suffix))
        .map(|(name, model_pt)| {
            let ct2 = load(&ct2_dir(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let ckpt = load_checkpoint(&model_pt).unwrap_or_else(|e| panic!("{}: {e}", model_pt.display()));
            Pair { name, ct2, ckpt }
        })
        .collect()
}

/// Every fairseq weight is there (but the derived ones), nothing else is, and in fairseq's order.
fn check_names(p: &Pair) {
    let expected: Vec<&String> = p.ckpt.state_dict.keys().filter(|k| !derived(k)).collect();
    let ours: Vec<&String> = p.ct2.state_dict.keys().collect();
    assert_eq!(ours, expected, "{}: names or order", p.name);
    assert!(p.ct2.unmapped.is_empty(), "{}: unmapped {:?}", p.name, p.ct2.unmapped);
    let mapped: Vec<&String> = p.ct2.name_map.iter().map(|m| &m.fairseq).collect();
    assert_eq!(mapped.len(), ours.len(), "{}: one name_map entry per name", p.name);
    for name in &ours {
        assert!(mapped.contains(name), "{}: {name} not in name_map", p.name);
    }
}

/// Flags and dimensions against the checkpoint's config.
fn check_flags(p: &Pair) {
    let cfg = &p.ckpt.config;
    let f = &p.ct2.flags;
    let enc = f.encoder.as_ref().unwrap();
    let dec = &f.decoder;
    assert_eq!((enc.embed_dim, dec.embed_dim), (cfg.encoder_embed_dim, cfg.decoder_embed_dim), "{}", p.name);
    assert_eq!((enc.ffn_embed_dim, dec.ffn_embed_dim), (cfg.encoder_ffn_embed_dim, cfg.decoder_ffn_embed_dim), "{}", p.name);
    assert_eq!((enc.layers as i64, dec.layers as i64), (cfg.encoder_layers, cfg.decoder_layers), "{}", p.name);
    assert_eq!((enc.num_heads, dec.num_heads), (cfg.encoder_attention_heads, cfg.decoder_attention_heads), "{}", p.name);
    assert_eq!((enc.pre_norm, dec.pre_norm), (cfg.encoder_normalize_before, cfg.decoder_normalize_before), "{}", p.name);
    assert_eq!(enc.final_layer_norm, cfg.encoder_normalize_before, "{}", p.name);
    assert_eq!(dec.final_layer_norm, cfg.decoder_normalize_before && !cfg.no_decoder_final_norm, "{}", p.name);
    assert_eq!(dec.activation.fairseq_name(), Some(cfg.activation_fn.as_str()), "{}", p.name);
    assert_eq!(enc.activation, dec.activation, "{}", p.name);
    for (side, flags) in [("encoder", enc), ("decoder", dec)] {
        let want = if cfg.no_scale_embedding { 1.0 } else { (flags.embed_dim as f32).sqrt() };
        assert_eq!(flags.embed_scale, want, "{} {side}", p.name);
        assert!(!flags.layernorm_embedding, "{} {side}", p.name);
    }
    assert_eq!((enc.max_positions, dec.max_positions), (Some(cfg.max_source_positions), Some(cfg.max_target_positions)), "{}", p.name);
    assert!(f.with_encoder_attention, "{}", p.name);
    assert_eq!((f.alignment_layer, f.alignment_heads), (-1, 0), "{}", p.name);
    assert_eq!(f.shared_embeddings, cfg.share_all_embeddings, "{}", p.name);
    assert_eq!(f.tied_projection, cfg.share_decoder_input_output_embed || cfg.share_all_embeddings, "{}", p.name);
    assert_eq!((p.ct2.binary_version, p.ct2.spec.as_str(), p.ct2.revision), (6, "TransformerSpec", 7), "{}", p.name);
    assert_eq!(p.ct2.config["decoder_start_token"], "</s>", "{}", p.name);
    // the vocabularies are fairseq's dictionaries, <pad> written as <blank>
    let v = &p.ct2.vocabularies;
    assert_eq!(v.shared, v.files == ["shared_vocabulary.json"], "{}", p.name);
    // (one dictionary for both sides is a shared vocabulary, whether or not the embeddings are)
    assert!(v.shared || !cfg.share_all_embeddings, "{}", p.name);
    assert_eq!(&v.target[..4], ["<s>", "<blank>", "</s>", "<unk>"], "{}", p.name);
    assert_eq!((p.ct2.padding_idx("encoder"), p.ct2.padding_idx("decoder")), (1, 1), "{}", p.name);
}

/// The stored position tables are fairseq's sinusoids, rows `padding_idx + 1 ..`.
fn check_positions(p: &Pair) -> f64 {
    assert_eq!(p.ct2.position_encodings.keys().collect::<Vec<_>>(), ["encoder.embed_positions", "decoder.embed_positions"], "{}", p.name);
    let mut worst = 0f64;
    for module in ["encoder.embed_positions", "decoder.embed_positions"] {
        let d = p.ct2.sinusoidal_max_abs_diff(module).unwrap().unwrap();
        assert!(d <= SINUSOIDAL_TOLERANCE, "{} {module}: {d}", p.name);
        worst = worst.max(d);
    }
    worst
}

/// The config `fairseq_args` implies is the checkpoint's, and a model builds from the state
/// dict with it, using every tensor.
fn check_model(p: &Pair) {
    let args = p.ct2.fairseq_args().unwrap_or_else(|e| panic!("{}: {e}", p.name));
    let cfg = TransformerConfig::from_namespace(&args, None, None, None).unwrap();
    let want = &p.ckpt.config;
    let dims = |c: &TransformerConfig| {
        (
            (c.encoder_embed_dim, c.encoder_ffn_embed_dim, c.encoder_layers, c.encoder_attention_heads, c.encoder_normalize_before, c.encoder_learned_pos),
            (c.decoder_embed_dim, c.decoder_ffn_embed_dim, c.decoder_layers, c.decoder_attention_heads, c.decoder_normalize_before, c.decoder_learned_pos),
            (c.decoder_input_dim, c.decoder_output_dim, c.no_decoder_final_norm, c.layernorm_embedding, c.no_scale_embedding),
            (c.activation_fn.clone(), c.share_all_embeddings, c.share_decoder_input_output_embed, c.max_source_positions, c.max_target_positions),
        )
    };
    assert_eq!(dims(&cfg), dims(want), "{}", p.name);
    for c in [&cfg, want] {
        let (_, report) = TransformerModel::from_state_dict(c, &p.ct2.state_dict, Device::Cpu, Kind::Float).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert!(report.unused_keys.is_empty(), "{}: unused {:?}", p.name, report.unused_keys);
    }
}

#[test]
fn float32_conversions_are_the_fairseq_weights_bit_for_bit() {
    for p in pairs("-float32") {
        check_names(&p);
        assert!(p.ct2.quantized.is_empty(), "{}: {:?}", p.name, p.ct2.quantized.keys());
        for (name, t) in &p.ct2.state_dict {
            let want = &p.ckpt.state_dict[name];
            assert!(same_bits(t, want), "{} {name}: max diff {}", p.name, max_abs(&(t - want)));
        }
        check_flags(&p);
        let pos = check_positions(&p);
        check_model(&p);
        let aliases: Vec<String> = p.ct2.aliases.iter().map(|(a, t)| format!("{a} -> {t}")).collect();
        eprintln!("{}: {} tensors equal bit for bit, positions within {pos:e} of fairseq's sinusoids, aliases [{}]", p.name, p.ct2.state_dict.len(), aliases.join(", "));
    }
}

#[test]
fn int8_conversions_are_the_fairseq_weights_within_half_a_step() {
    for p in pairs("-int8") {
        check_names(&p);
        check_flags(&p);
        check_positions(&p);
        check_model(&p);
        let mut worst_steps = 0f64;
        for (name, t) in &p.ct2.state_dict {
            let want = &p.ckpt.state_dict[name];
            // CTranslate2 quantizes every Linear weight and embedding (LinearSpec and
            // EmbeddingsSpec declare `weight_scale`), nothing else
            let Some(q) = p.ct2.quantized.get(name) else {
                assert!(t.dim() == 1, "{} {name}: a matrix not quantized", p.name);
                assert!(same_bits(t, want), "{} {name}: max diff {}", p.name, max_abs(&(t - want)));
                continue;
            };
            assert_eq!((q.dtype, q.values.kind(), t.dim()), (DataType::Int8, Kind::Int8, 2), "{} {name}", p.name);
            assert!(q.rounded, "{} {name}", p.name);
            let scale = q.scale.as_ref().unwrap();
            assert_eq!(scale.size(), [t.size()[0]], "{} {name}", p.name);
            let err = (t - want).abs();
            let bound = q.max_abs_error().unwrap();
            assert!(bool::try_from(err.le_tensor(&bound).all()).unwrap(), "{} {name}: beyond half a step", p.name);
            worst_steps = worst_steps.max((err * scale.unsqueeze(1)).max().double_value(&[]));
            // and it is exactly model_spec.py's quantization of the fairseq weight:
            // scale = 127 / max|row|, values = rint(w * scale), in float32
            let amax = want.abs().amax([1].as_slice(), false);
            let amax = amax.where_self(&amax.ne(0.0), &Tensor::from(127f32));
            let recomputed = Tensor::from(127f32) / &amax;
            assert!(same_bits(scale, &recomputed), "{} {name}: scale", p.name);
            let values = (want * recomputed.unsqueeze(1)).round().to_kind(Kind::Int8);
            assert!(values.equal(&q.values), "{} {name}: values", p.name);
        }
        let quantized: Vec<&String> = p.ct2.quantized.keys().collect();
        assert!(quantized.iter().any(|k| k.ends_with("embed_tokens.weight")), "{}", p.name);
        eprintln!("{}: {} of {} tensors int8, the rest equal bit for bit; worst |fairseq - dequantized| = {worst_steps:.6} steps", p.name, quantized.len(), p.ct2.state_dict.len());
    }
}

/// A CTranslate2 directory whose `model.bin` holds `bytes`, config and vocabularies copied.
fn dir_with(src: &str, bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(ct2_dir(src)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.path().join("model.bin"), bytes).unwrap();
    dir
}

fn format_error(result: Result<Ct2Model, Ct2Error>) -> ModelBinError {
    match result {
        Err(Ct2Error::Format { source, .. }) => source,
        Err(e) => panic!("not a format error: {e}"),
        Ok(_) => panic!("read a corrupt file"),
    }
}

/// The byte offset just after `name`'s NUL in a model.bin: its rank.
fn after_name(bytes: &[u8], name: &str) -> usize {
    let mut needle = (name.len() as u16 + 1).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    needle.push(0);
    bytes.windows(needle.len()).position(|w| w == needle).unwrap() + needle.len()
}

#[test]
fn a_truncated_file_is_an_error_naming_what_is_cut() {
    let bytes = std::fs::read(ct2_dir("postnorm-float32/model.bin")).unwrap();
    let embeddings = after_name(&bytes, "decoder/embeddings/weight");
    // the binary version, the spec name, a variable name, a shape, the data, the aliases
    for (cut, what) in [(2, "binary version"), (8, "spec name"), (embeddings - 3, "name of variable"), (embeddings + 5, "dimension 1 of decoder/embeddings/weight"), (embeddings + 20, "data of decoder/embeddings/weight"), (bytes.len() - 1, "alias")] {
        let dir = dir_with("postnorm-float32", &bytes[..cut]);
        let e = format_error(load(dir.path()));
        let ModelBinError::Truncated { len, what: got, .. } = &e else { panic!("cut at {cut}: {e}") };
        assert_eq!(*len, cut as u64);
        assert!(got.contains(what), "cut at {cut}: {e}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
    // every prefix of a small file is an error, never a panic
    let small = model_bin::write("TransformerSpec", 7, &[("decoder/num_heads", &[], DataType::Int16, &4i16.to_le_bytes()), ("decoder/x", &[2, 3], DataType::Int8, &[1, 2, 3, 4, 5, 6])], &[("decoder/y", "decoder/x")]);
    assert!(model_bin::parse(&small).is_ok());
    for cut in 0..small.len() {
        assert!(matches!(model_bin::parse(&small[..cut]), Err(ModelBinError::Truncated { .. })), "cut at {cut}");
    }
    let mut longer = small.clone();
    longer.push(0);
    assert_eq!(model_bin::parse(&longer).unwrap_err(), ModelBinError::Trailing { offset: small.len() as u64, extra: 1 });
}

#[test]
fn a_wrong_dtype_rank_or_shape_is_an_error() {
    let bytes = std::fs::read(ct2_dir("postnorm-float32/model.bin")).unwrap();
    let rank = after_name(&bytes, "decoder/embeddings/weight");
    assert_eq!(bytes[rank], 2);
    let dtype = rank + 1 + 8;
    let corrupt = |at: usize, patch: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + patch.len()].copy_from_slice(patch);
        format_error(from_bytes(Path::new("model.bin"), &b, Json::Null, Vocabularies::default()))
    };
    for id in [6u8, 9, 255] {
        assert_eq!(corrupt(dtype, &[id]), ModelBinError::Dtype { name: "decoder/embeddings/weight".into(), id });
    }
    assert_eq!(corrupt(rank, &[200]), ModelBinError::Rank { name: "decoder/embeddings/weight".into(), rank: 200 });
    // dimensions whose product overflows, or that need more bytes than are stored
    let e = corrupt(rank + 1, &[0xff; 8]);
    assert!(matches!(e, ModelBinError::Overflow { ref shape, .. } if shape == &[u32::MAX, u32::MAX]), "{e}");
    let e = corrupt(rank + 1, &[0, 0, 1, 0, 0, 0, 1, 0]);
    assert!(matches!(e, ModelBinError::Payload { needed, nbytes, .. } if needed == 4 << 32 && nbytes == 48 * 32 * 4), "{e}");
    // a byte count beyond the file
    let e = corrupt(dtype + 1, &[0xff, 0xff, 0xff, 0x7f]);
    assert!(matches!(e, ModelBinError::Payload { .. }), "{e}");
    // a rank up to MAX_RANK whose dimensions overflow only together
    let dims = [u32::MAX; MAX_RANK as usize];
    let b = model_bin::write("TransformerSpec", 7, &[("encoder/x", &dims, DataType::Float32, &[])], &[]);
    assert!(matches!(model_bin::parse(&b).unwrap_err(), ModelBinError::Overflow { .. }));
    // a rank past the end, a dtype id as a rank: errors, whatever they make of the bytes after
    for at in [rank, dtype] {
        for v in [3u8, 4, 8] {
            let mut b = bytes.clone();
            b[at] = v;
            assert!(from_bytes(Path::new("model.bin"), &b, Json::Null, Vocabularies::default()).is_err(), "byte {at} = {v}");
        }
    }
}

#[test]
fn corrupt_headers_strings_and_aliases_are_errors() {
    let ok = |vars: &[(&str, &[u32], DataType, &[u8])], aliases: &[(&str, &str)]| model_bin::write("TransformerSpec", 7, vars, aliases);
    let one: &[(&str, &[u32], DataType, &[u8])] = &[("decoder/x", &[1], DataType::Float32, &[0, 0, 128, 63])];
    let base = ok(one, &[]);
    for version in [0u32, 7, u32::MAX] {
        let mut b = base.clone();
        b[..4].copy_from_slice(&version.to_le_bytes());
        assert_eq!(model_bin::parse(&b).unwrap_err(), ModelBinError::BinaryVersion(version));
    }
    // the spec name: length 0, no NUL, not UTF-8
    let mut b = base.clone();
    b[4..6].copy_from_slice(&0u16.to_le_bytes());
    assert!(matches!(model_bin::parse(&b).unwrap_err(), ModelBinError::EmptyString { offset: 4, .. }));
    let mut b = base.clone();
    b[6 + "TransformerSpec".len()] = b'!';
    assert!(matches!(model_bin::parse(&b).unwrap_err(), ModelBinError::Unterminated { .. }));
    let mut b = base.clone();
    b[6] = 0xff;
    assert!(matches!(model_bin::parse(&b).unwrap_err(), ModelBinError::NotUtf8 { .. }));
    // a name stored twice, an alias of nothing, an alias that is a variable
    let twice = ok(&[one[0], one[0]], &[]);
    assert_eq!(model_bin::parse(&twice).unwrap_err(), ModelBinError::Duplicate { name: "decoder/x".into() });
    let dangling = ok(one, &[("decoder/y", "decoder/z")]);
    assert_eq!(model_bin::parse(&dangling).unwrap_err(), ModelBinError::AliasTarget { alias: "decoder/y".into(), target: "decoder/z".into() });
    let shadow = ok(one, &[("decoder/x", "decoder/x")]);
    assert_eq!(model_bin::parse(&shadow).unwrap_err(), ModelBinError::Duplicate { name: "decoder/x".into() });
    // a count of variables far beyond the file reserves nothing and fails on the first missing one
    let mut b = ok(&[], &[]);
    b.truncate(b.len() - 4);
    let count = b.len() - 4;
    b[count..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(model_bin::parse(&b).unwrap_err(), ModelBinError::Truncated { .. }));
}

#[test]
fn binary_versions_before_4_store_item_sizes() {
    // version 3: u8 item size and u32 element count instead of dtype id and byte count
    let mut b = 3u32.to_le_bytes().to_vec();
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend_from_slice(&(s.len() as u16 + 1).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    };
    string(&mut b, "TransformerSpec");
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    string(&mut b, "x");
    b.push(1);
    b.extend_from_slice(&3u32.to_le_bytes());
    b.push(2);
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&[1, 0, 2, 0, 3, 0]);
    b.extend_from_slice(&0u32.to_le_bytes());
    let bin = model_bin::parse(&b).unwrap();
    assert_eq!((bin.binary_version, bin.revision), (3, 2));
    assert_eq!((bin.variables["x"].dtype, bin.variables["x"].data), (DataType::Int16, &[1u8, 0, 2, 0, 3, 0][..]));
    let at = b.len() - 4 - 6 - 4 - 1;
    b[at] = 3;
    assert_eq!(model_bin::parse(&b).unwrap_err(), ModelBinError::ItemSize { name: "x".into(), size: 3 });
}

type Var = (String, Vec<u32>, DataType, Vec<u8>);

/// A fixture's model.bin rewritten: `edit` gets each variable and returns its replacement (none
/// to drop it); aliases go with their name and their target.
fn rewrite(src: &str, edit: impl Fn(&str, &[u32], DataType, &[u8]) -> Vec<Var>) -> Vec<u8> {
    let bytes = std::fs::read(ct2_dir(src).join("model.bin")).unwrap();
    let bin = model_bin::parse(&bytes).unwrap();
    let vars: Vec<Var> = bin.variables.values().flat_map(|v| edit(&v.name, &v.shape, v.dtype, v.data)).collect();
    let kept = |n: &str| vars.iter().any(|v| v.0 == n);
    let aliases: Vec<(&str, &str)> = bin
        .aliases
        .iter()
        .filter(|(a, t)| kept(t) && !edit(a, &[], DataType::Float32, &[]).is_empty())
        .map(|(a, t)| (a.as_str(), t.as_str()))
        .collect();
    let refs: Vec<(&str, &[u32], DataType, &[u8])> = vars.iter().map(|(n, s, d, b)| (n.as_str(), s.as_slice(), *d, b.as_slice())).collect();
    model_bin::write(&bin.spec, bin.revision, &refs, &aliases)
}

fn keep(name: &str, shape: &[u32], dtype: DataType, data: &[u8]) -> Vec<Var> {
    vec![(name.to_string(), shape.to_vec(), dtype, data.to_vec())]
}

#[test]
fn a_missing_or_misshapen_scale_is_an_error() {
    let no_scale = rewrite("postnorm-int8", |n, s, d, b| if n == "encoder/layer_0/ffn/linear_0/weight_scale" { vec![] } else { keep(n, s, d, b) });
    let dir = dir_with("postnorm-int8", &no_scale);
    let e = load(dir.path()).unwrap_err();
    assert!(matches!(&e, Ct2Error::Variable { name, msg, .. } if name == "encoder/layer_0/ffn/linear_0/weight" && msg.contains("weight_scale")), "{e}");
    let short = rewrite("postnorm-int8", |n, s, d, b| if n == "encoder/layer_0/ffn/linear_0/weight_scale" { keep(n, &[s[0] - 1], d, &b[4..]) } else { keep(n, s, d, b) });
    let e = load(dir_with("postnorm-int8", &short).path()).unwrap_err();
    assert!(matches!(&e, Ct2Error::Variable { msg, .. } if msg.contains("[rows] scale")), "{e}");
    let zero = rewrite("postnorm-int8", |n, s, d, b| if n == "encoder/layer_0/ffn/linear_0/weight_scale" { keep(n, s, d, &[b[..4].to_vec(), vec![0; b.len() - 4]].concat()) } else { keep(n, s, d, b) });
    let e = load(dir_with("postnorm-int8", &zero).path()).unwrap_err();
    assert!(matches!(&e, Ct2Error::Variable { name, msg, .. } if name.ends_with("weight_scale") && msg.contains("above 0")), "{e}");
    // a fused projection whose rows do not split in three
    let odd = rewrite("postnorm-float32", |n, s, d, b| if n == "encoder/layer_0/self_attention/linear_0/bias" { keep(n, &[s[0] - 1], d, &b[4..]) } else { keep(n, s, d, b) });
    let e = load(dir_with("postnorm-float32", &odd).path()).unwrap_err();
    assert!(matches!(&e, Ct2Error::Variable { msg, .. } if msg.contains("do not split")), "{e}");
    // a vocabulary that is not the embedding's
    let dir = dir_with("postnorm-float32", &std::fs::read(ct2_dir("postnorm-float32/model.bin")).unwrap());
    std::fs::write(dir.path().join("shared_vocabulary.json"), "[\"<s>\"]").unwrap();
    assert!(matches!(load(dir.path()).unwrap_err(), Ct2Error::Invalid { msg, .. } if msg.contains("vocabulary")));
}

#[test]
fn other_specs_and_revisions_are_refused() {
    for (spec, revision) in [("TransformerSpec", 4), ("TransformerSpec", 8), ("WhisperSpec", 3)] {
        let b = model_bin::write(spec, revision, &[], &[]);
        let e = from_bytes(Path::new("model.bin"), &b, Json::Null, Vocabularies::default()).unwrap_err();
        assert!(matches!(&e, Ct2Error::Unsupported { spec: s, revision: r, .. } if s == spec && *r == revision), "{e}");
    }
}

#[test]
fn flipped_bytes_never_panic() {
    let bytes = std::fs::read(ct2_dir("postnorm-int8/model.bin")).unwrap();
    // the header and the first variables, where the structure is
    let span = after_name(&bytes, "decoder/layer_0/attention/layer_norm/beta");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut errors = 0;
    for _ in 0..400 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut b = bytes.clone();
        let at = (state % span as u64) as usize;
        b[at] ^= 1 << (state >> 32) % 8;
        errors += from_bytes(Path::new("model.bin"), &b, Json::Null, Vocabularies::default()).is_err() as usize;
    }
    assert!(errors > 0, "{errors}");
}

#[test]
fn text_vocabularies_drop_a_carriage_return_every_line_has() {
    let dir = dir_with("postnorm-float32", &std::fs::read(ct2_dir("postnorm-float32/model.bin")).unwrap());
    let tokens: Vec<String> = serde_json::from_str(&std::fs::read_to_string(dir.path().join("shared_vocabulary.json")).unwrap()).unwrap();
    std::fs::remove_file(dir.path().join("shared_vocabulary.json")).unwrap();
    std::fs::write(dir.path().join("shared_vocabulary.txt"), tokens.iter().map(|t| format!("{t}\r\n")).collect::<String>()).unwrap();
    let m = load(&dir.path().join("model.bin")).unwrap();
    assert_eq!((m.vocabularies.files.as_slice(), &m.vocabularies.target), (&["shared_vocabulary.txt".to_string()][..], &tokens));
    assert_eq!(m.dir, dir.path());
    std::fs::remove_file(dir.path().join("shared_vocabulary.txt")).unwrap();
    assert!(matches!(load(dir.path()).unwrap_err(), Ct2Error::Invalid { msg, .. } if msg.contains("target vocabulary")));
}

#[test]
fn names_map_both_ways_in_fairseq_order() {
    assert_eq!(names::fairseq_names("decoder/layer_10/attention/linear_1/bias").unwrap(), ["decoder.layers.10.encoder_attn.k_proj.bias", "decoder.layers.10.encoder_attn.v_proj.bias"]);
    assert_eq!(names::fairseq_names("encoder/layer_0/ffn/layer_norm/gamma").unwrap(), ["encoder.layers.0.final_layer_norm.weight"]);
    for unmapped in ["encoder/attention/linear_0/weight", "encoder/layer_0/attention/linear_0/weight", "decoder/layer_01/ffn/linear_0/weight", "decoder/embeddings_0/weight", "encoder/embeddings_1/weight", "decoder/layer_0/ffn/layer_norm/weight", "decoder/projection/bias", "x/layer_0/ffn/linear_0/weight"] {
        assert_eq!(names::fairseq_names(unmapped), None, "{unmapped}");
    }
    let mut keys: Vec<&str> = vec!["decoder.output_projection.weight", "decoder.layers.0.fc1.bias", "decoder.layers.0.encoder_attn.q_proj.weight", "decoder.layers.0.self_attn.k_proj.weight", "encoder.layer_norm.weight", "decoder.layers.0.self_attn.out_proj.weight", "encoder.embed_tokens.weight"];
    keys.sort_by_key(|k| names::fairseq_order(k));
    assert_eq!(keys, ["encoder.embed_tokens.weight", "encoder.layer_norm.weight", "decoder.layers.0.self_attn.k_proj.weight", "decoder.layers.0.self_attn.out_proj.weight", "decoder.layers.0.encoder_attn.q_proj.weight", "decoder.layers.0.fc1.bias", "decoder.output_projection.weight"]);
}

/// A position table stored in bfloat16 or float16 (`--quantization bfloat16` or `float16`
/// stores every float variable so) is still read as fairseq's sinusoids; one moved by a row is
/// not. A bfloat16 table is a float16 table as well, and float16's rounding is too small for it.
#[test]
fn sixteen_bit_position_tables_read_as_sinusoids() {
    let positions = |kind: Kind, shift: bool| {
        rewrite("postnorm-float32", move |n, s, d, b| {
            // (`rewrite` also asks about aliases, with no shape)
            if !n.ends_with("/position_encodings/encodings") || s.len() != 2 {
                return keep(n, s, d, b);
            }
            let table = Tensor::f_from_data_size(b, &[i64::from(s[0]), i64::from(s[1])], Kind::Float).unwrap();
            let table = if shift { table.roll([1], [0]) } else { table };
            let dtype = if kind == Kind::BFloat16 { DataType::BFloat16 } else { DataType::Float16 };
            let bits = table.to_kind(kind).view_dtype(Kind::Int16);
            let bytes: Vec<u8> = Vec::<i16>::try_from(bits.flatten(0, -1)).unwrap().iter().flat_map(|x| x.to_le_bytes()).collect();
            keep(n, s, dtype, &bytes)
        })
    };
    for kind in [Kind::BFloat16, Kind::Half] {
        let dir = dir_with("postnorm-float32", &positions(kind, false));
        let m = load(dir.path()).unwrap();
        for module in ["encoder.embed_positions", "decoder.embed_positions"] {
            let d = m.sinusoidal_max_abs_diff(module).unwrap().unwrap();
            assert!(d <= SINUSOIDAL_TOLERANCE, "{kind:?} {module}: {d}");
        }
        let args = m.fairseq_args().unwrap();
        assert_eq!((&args["encoder_learned_pos"], &args["decoder_learned_pos"]), (&Json::Bool(false), &Json::Bool(false)), "{kind:?}");
        let shifted = load(dir_with("postnorm-float32", &positions(kind, true)).path()).unwrap();
        assert!(shifted.sinusoidal_max_abs_diff("decoder.embed_positions").unwrap().unwrap() > 1e-2, "{kind:?}");
    }
}
