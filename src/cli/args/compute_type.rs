//! `--compute-type`'s values with their help: the names are the library's
//! ([`ComputeType`], on its ground floor), the words for a user are the CLI's.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use tchseq::config::ComputeType;

/// What `--help` says of each compute type.
fn help(compute_type: ComputeType) -> &'static str {
    match compute_type {
        ComputeType::Exact => "fairseq's arithmetic, bit for bit",
        ComputeType::Float32 => "fp32, faster: scores move in the last digits",
        ComputeType::Int8 => "int8 linear layers, faster still: hypotheses may differ",
        ComputeType::Float16 => "the model halved as fairseq's --fp16 halves it (for GPUs: slow on a CPU without AVX512_FP16)",
        ComputeType::BFloat16 => "the model in bfloat16 as fairseq's --bf16 (on a CPU, it needs AVX512_BF16)",
    }
}

/// The parser of `--compute-type`: a name or alias of [`ComputeType`], each name with its help.
pub fn parser() -> impl TypedValueParser<Value = ComputeType> {
    let values = ComputeType::ALL.map(|c| {
        let value = PossibleValue::new(c.name()).help(help(c));
        match c.alias() {
            Some(alias) => value.alias(alias),
            None => value,
        }
    });
    PossibleValuesParser::new(values).try_map(|name| name.parse::<ComputeType>())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flag {
        #[arg(long = "compute-type", value_parser = parser(), default_value_t = ComputeType::Exact)]
        compute_type: ComputeType,
    }

    #[test]
    fn every_name_and_alias_is_a_value_and_other_words_are_refused() {
        assert_eq!(Flag::try_parse_from(["t"]).unwrap().compute_type, ComputeType::Exact);
        for c in ComputeType::ALL {
            for name in [Some(c.name()), c.alias()].into_iter().flatten() {
                assert_eq!(Flag::try_parse_from(["t", "--compute-type", name]).unwrap().compute_type, c, "{name}");
            }
        }
        let err = Flag::try_parse_from(["t", "--compute-type", "int4"]).err().unwrap().to_string();
        assert!(err.contains("possible values: exact, float32, int8, float16, bfloat16"), "{err}");
    }
}
