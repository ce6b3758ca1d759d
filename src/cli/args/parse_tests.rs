use super::super::fairseq::{lookup, markdown_table, Arity, Treatment, FLAGS};
use super::*;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

fn translate(extra: &[&str]) -> Result<Cli, ParseError> {
    parse_from(["tchseq", "translate", "-m", "model"].iter().chain(extra))
}

fn message(e: ParseError) -> String {
    match e {
        ParseError::Usage(m) => m,
        ParseError::Clap(e) => e.to_string(),
    }
}

/// The table names every option fairseq-interactive and fairseq-generate 0.12.2 define (as
/// reference/fairseq_flags.py lists them), in that order, with fairseq's arity.
#[test]
fn the_table_has_every_fairseq_option_with_its_arity() {
    let listed = repo_file("tests/fixtures/fairseq_flags.tsv");
    let fairseq: Vec<(&str, &str)> = listed.lines().map(|l| {
        let mut fields = l.split('\t');
        (fields.next().unwrap(), fields.next().unwrap())
    }).collect();
    assert!(fairseq.len() > 200, "{} options", fairseq.len());
    let ours: Vec<&str> = FLAGS.iter().map(|f| f.name).collect();
    assert_eq!(ours, fairseq.iter().map(|f| f.0).collect::<Vec<_>>());
    for (name, arity) in fairseq {
        let flag = lookup(name).unwrap();
        let ok = matches!((flag.arity, arity), (Arity::Flag, "flag") | (Arity::Value, "value") | (Arity::Optional(_), "optional"));
        assert!(ok, "{name}: fairseq's arity is {arity}, the table's {:?}", flag.arity);
    }
}

/// Walks the table: a flag that is ours exists with fairseq's arity, one that becomes ours
/// parses as those words, an ignored one changes nothing, a refused one names what to use.
/// docs/commands.md prints this very table.
#[test]
fn every_row_of_the_table_does_what_it_says() {
    let translate_cmd = command().find_subcommand("translate").unwrap().clone();
    let baseline = format!("{:?}", translate(&[]).unwrap());
    // (not the default device, so that --cpu shows)
    let auto = |extra: &[&str]| translate(&[&["--device", "auto"], extra].concat());
    for flag in FLAGS {
        let value: &[&str] = match flag.arity {
            Arity::Value => &["1"],
            _ => &[],
        };
        let with: Vec<&str> = [flag.name].iter().chain(value).copied().collect();
        match flag.treatment {
            Treatment::Same => {
                let long = &flag.name[2..];
                let arg = translate_cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|v| v.contains(&long)))
                    .unwrap_or_else(|| panic!("{}: translate has no such flag", flag.name));
                assert_eq!(arg.get_action().takes_values(), flag.arity != Arity::Flag, "{}", flag.name);
            }
            Treatment::Becomes(words) => {
                let got = translate(&with).unwrap_or_else(|e| panic!("{}: {}", flag.name, message(e)));
                let want: Vec<&str> = words.iter().chain(value).copied().collect();
                let want = translate(&want).unwrap();
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{}", flag.name);
                assert_ne!(format!("{:?}", auto(&with).unwrap()), format!("{:?}", auto(&[]).unwrap()), "{} changes nothing", flag.name);
            }
            Treatment::Ignored(_) => {
                let got = translate(&with).unwrap_or_else(|e| panic!("{}: {}", flag.name, message(e)));
                assert_eq!(format!("{got:?}"), baseline, "{}", flag.name);
                let inline: Vec<String> = match value {
                    [v] => vec![format!("{}={v}", flag.name)],
                    _ => vec![flag.name.to_string()],
                };
                let inline: Vec<&str> = inline.iter().map(String::as_str).collect();
                assert_eq!(format!("{:?}", translate(&inline).unwrap()), baseline, "{}", flag.name);
            }
            Treatment::Refused(instead) => {
                let e = message(translate(&with).unwrap_err());
                assert!(e.contains(flag.name) && e.contains(instead), "{}: {e}", flag.name);
            }
        }
    }
    let docs = repo_file("docs/commands.md");
    assert!(docs.contains(&markdown_table("translate")), "docs/commands.md does not print the table of src/cli/args/fairseq_table.rs");
}

#[test]
fn fairseq_flags_become_ours() {
    let Command::Translate(a) = translate(&["--fp16", "--cpu", "--print-alignment", "hard", "--constraints", "unordered"]).unwrap().command else {
        unreachable!()
    };
    assert_eq!(a.dtype, super::super::DtypeArg::Fp16);
    assert_eq!(a.print_alignment.as_deref(), Some("hard"));
    assert_eq!(a.constraints, Some(super::super::ConstraintsArg::Unordered));
    assert!(a.sentences.is_empty(), "the optional values were taken as values: {:?}", a.sentences);
    // an optional value fairseq does not know stays a sentence; a flag after it is a flag
    let Command::Translate(a) = translate(&["--remove-bpe", "Hello world", "--constraints", "--beam", "2"]).unwrap().command else {
        unreachable!()
    };
    assert_eq!(a.post_process.as_deref(), Some("subword_nmt"));
    assert_eq!(a.sentences, ["Hello world"]);
    assert_eq!(a.constraints, Some(super::super::ConstraintsArg::Ordered));
    assert_eq!(a.search.beam, 2);
    let e = message(translate(&["--print-alignment", "soft"]).unwrap_err());
    assert!(e.contains("soft") && e.contains("hard"), "{e}");
    assert!(message(translate(&["--cpu=yes"]).unwrap_err()).contains("--cpu takes no value"));
    assert!(message(translate(&["--log-format"]).unwrap_err()).contains("--log-format needs a value"));
}

/// `--lenpen -0.5`, as fairseq's argparse takes it, after every flag that takes a number.
#[test]
fn negative_numbers_are_values() {
    let Command::Translate(a) = translate(&["--lenpen", "-0.5", "--unkpen", "-1", "--max-len-a", "-0.25", "--sampling-topk", "-1",
        "--sampling-topp", "-0.5", "--diversity-rate", "-1.5", "--temperature", "-2"])
    .unwrap()
    .command
    else {
        unreachable!()
    };
    assert_eq!((a.search.lenpen, a.search.unkpen, a.search.max_len_a), (-0.5, -1.0, -0.25));
    assert_eq!((a.sampling_topk, a.sampling_topp, a.search.diversity_rate, a.temperature), (-1, -0.5, -1.5, -2.0));
    assert!(a.sentences.is_empty());
    // in every command
    let cli = parse_from(["tchseq", "verify", "-m", "m", "--reference", "r.pt", "--atol", "-1"]).unwrap();
    let Command::Verify(v) = cli.command else { unreachable!() };
    assert_eq!(v.atol, Some(-1.0));
    // a sentence may still be a negative number
    let Command::Translate(a) = translate(&["-5"]).unwrap().command else { unreachable!() };
    assert_eq!(a.sentences, ["-5"]);
}

/// clap's tip for an unknown flag is to repeat it after `--`, which would translate the flag's
/// name: the error names the help instead.
#[test]
fn an_unknown_flag_is_an_error_without_the_double_dash_tip() {
    for flag in ["--fp17", "--beem", "-x"] {
        let e = message(translate(&[flag]).unwrap_err());
        assert!(e.contains(flag) && e.contains("tchseq translate --help") && !e.contains("-- "), "{e}");
    }
    let e = message(translate(&["--beem", "3"]).unwrap_err());
    assert!(e.contains("did you mean --beam"), "{e}");
}

/// `tchseq translate -m M small.en` would translate the words "small.en".
#[test]
fn a_sentence_that_names_a_file_or_directory_is_refused_unless_after_double_dash() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("small.en");
    std::fs::write(&file, "Two dogs play .\n").unwrap();
    let (file, dir) = (file.to_str().unwrap(), dir.path().to_str().unwrap());
    let e = message(translate(&[file]).unwrap_err());
    assert!(e.contains(file) && e.contains("--input") && e.contains("`--`"), "{e}");
    let e = message(translate(&["A dog runs.", dir]).unwrap_err());
    assert!(e.contains("directory") && e.contains("-m"), "{e}");
    let e = message(parse_from(["tchseq", "attention", "-m", "m", "-o", "a.svg", file]).unwrap_err());
    assert!(e.contains(file), "{e}");
    let Command::Translate(a) = translate(&["A dog runs.", "--", file]).unwrap().command else { unreachable!() };
    assert_eq!(a.sentences, ["A dog runs.", file]);
    let Command::Translate(a) = translate(&["--", "--fp16"]).unwrap().command else { unreachable!() };
    assert_eq!(a.sentences, ["--fp16"]);
    // a file is taken with --input, and a sentence that happens to be no path passes
    assert!(translate(&["--input", file]).is_ok());
    assert!(translate(&["small.en"]).is_ok() || Path::new("small.en").exists());
}

/// sacrebleu's two-letter options after `sacrebleu`, as sacrebleu's own command lines have them.
#[test]
fn sacrebleu_takes_its_two_letter_options() {
    let cli = parse_from(["tchseq", "sacrebleu", "ref.de", "-i", "hyp.de", "-tok", "intl", "-lc", "-m", "bleu", "chrf"]).unwrap();
    let Command::Sacrebleu(a) = cli.command else { unreachable!() };
    assert_eq!((a.tokenize.as_str(), a.lowercase), ("intl", true));
    assert_eq!(a.metrics, ["bleu", "chrf"]);
    // only after the command, and not after `--`
    assert!(parse_from(["tchseq", "translate", "-m", "m", "-lc"]).is_err());
    let cli = parse_from(["tchseq", "sacrebleu", "-i", "hyp.de", "--", "-lc"]).unwrap();
    let Command::Sacrebleu(a) = cli.command else { unreachable!() };
    assert!(!a.lowercase);
    // the resampling options, and several systems after -i
    let cli = parse_from(["tchseq", "sacrebleu", "ref.de", "-i", "a.de", "b.de", "-pbs", "-pbsn", "200", "-m", "bleu"]).unwrap();
    let Command::Sacrebleu(a) = cli.command else { unreachable!() };
    assert_eq!((a.input.len(), a.paired_bs, a.paired_bs_n), (2, true, 200));
    let cli = parse_from(["tchseq", "sacrebleu", "ref.de", "-i", "a.de", "-ci", "-cin", "-5"]).unwrap();
    let Command::Sacrebleu(a) = cli.command else { unreachable!() };
    assert_eq!((a.confidence, a.confidence_n), (true, -5));
    assert!(parse_from(["tchseq", "sacrebleu", "ref.de", "-i", "a.de", "b.de", "-pbs", "-par"]).is_err());
}

fn generate(extra: &[&str]) -> Result<Cli, ParseError> {
    parse_from(["tchseq", "generate", "data-bin", "--path", "m.pt"].iter().chain(extra))
}

/// `generate`'s own rows: fairseq-generate's options it honours, and the differences from
/// `translate`; docs/commands.md prints them.
#[test]
fn fairseq_generate_command_lines_parse_as_fairseq_reads_them() {
    use super::super::fairseq::GENERATE_FLAGS;
    for flag in GENERATE_FLAGS {
        assert!(lookup(flag.name).is_some(), "{} is not one of fairseq's options", flag.name);
    }
    let Command::Generate(a) = generate(&[
        "--cpu", "--fp16", "--gen-subset", "valid", "--dataset-impl", "lazy", "--results-path", "out", "--scoring", "chrf",
        "--remove-bpe", "--distributed-world-size", "3", "--distributed-rank", "2", "--required-batch-size-multiple", "1",
        "--skip-invalid-size-inputs-valid-test", "--max-source-positions", "100", "--lenpen", "-0.5", "--sacrebleu",
        "--buffer-size", "10", "--bf16", "--num-workers", "2", "--max-sentences", "9",
    ])
    .unwrap()
    .command
    else {
        unreachable!()
    };
    assert_eq!((a.gen_subset.as_str(), a.dataset_impl.as_deref()), ("valid", Some("lazy")));
    assert_eq!((a.num_shards, a.shard_id, a.required_batch_size_multiple), (3, 2, 1));
    assert_eq!(a.scoring, super::super::generate::ScoringArg::Chrf);
    assert_eq!(a.post_process.as_deref(), Some("subword_nmt"));
    assert_eq!((a.search.lenpen, a.batching.batch_size, a.max_source_positions), (-0.5, Some(9), 100));
    assert_eq!(a.dtype, super::super::DtypeArg::Fp16);
    assert!(a.skip_invalid_size_inputs_valid_test && a.results_path.is_some());
    for (refused, says) in [("--constraints", "no constraints"), ("--truncate-source", "does not cut"), ("--input", "data-bin")] {
        let e = message(generate(&[refused, "x"]).unwrap_err());
        assert!(e.contains(refused) && e.contains(says), "{refused}: {e}");
    }
    // translate keeps its own treatment of the same flags
    let Command::Translate(t) = translate(&["--buffer-size", "10", "--gen-subset", "valid"]).unwrap().command else { unreachable!() };
    assert_eq!(t.buffer_size, 10);
    let docs = repo_file("docs/commands.md");
    assert!(docs.contains(&markdown_table("generate")), "docs/commands.md does not print generate's rows of src/cli/args/fairseq.rs");
}
