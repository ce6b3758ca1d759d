use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::*;
use crate::checkpoint::load_checkpoint;
use crate::generate::sequence_generator::Specials;
use crate::generate::{EnsembleModel, GeneratorConfig, Hypothesis, SequenceGenerator};

fn fixture_model() -> TransformerModel {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/postnorm/model.pt");
    let ckpt = load_checkpoint(&path).unwrap();
    TransformerModel::from_state_dict(&ckpt.config, &ckpt.state_dict, Device::Cpu, Kind::Float).unwrap().0
}

/// Seven left-padded batches of made-up sentences, each row ending in EOS.
fn batches() -> Vec<Tensor> {
    (0..7i64)
        .map(|b| {
            let rows: Vec<Vec<i64>> = (0..3 + b % 3)
                .map(|r| {
                    let len = 2 + (b + r) % 6;
                    let mut row: Vec<i64> = (0..len).map(|i| 4 + (b * 7 + r * 3 + i * 5) % 20).collect();
                    row.push(2);
                    row
                })
                .collect();
            let width = rows.iter().map(Vec::len).max().unwrap();
            let flat: Vec<i64> =
                rows.iter().flat_map(|r| std::iter::repeat_n(1, width - r.len()).chain(r.iter().copied())).collect();
            Tensor::from_slice(&flat).view([rows.len() as i64, width as i64])
        })
        .collect()
}

#[test]
fn outputs_do_not_depend_on_the_number_of_workers() {
    let models = vec![fixture_model()];
    let vocab = models[0].decoder.output_projection.weight.size()[0] as usize;
    let generator = SequenceGenerator::new(GeneratorConfig::default(), vocab, Specials::default()).unwrap();
    let run = |workers: usize| -> Vec<Vec<Vec<Hypothesis>>> {
        run_jobs(&models, batches(), workers, |models, src| {
            generator.generate(&mut EnsembleModel::new(models)?, &src)
        })
        .unwrap()
    };
    let alone = run(1);
    assert_eq!(alone.len(), 7);
    assert!(alone.iter().flatten().all(|hypos| hypos.len() == 5));
    assert_eq!(run(3), alone);
    assert_eq!(run(16), alone);
}

#[test]
fn the_earliest_failing_job_is_reported() {
    let models = vec![fixture_model()];
    let jobs: Vec<usize> = (0..9).collect();
    let err = run_jobs(&models, jobs, 3, |_, i| {
        if i % 4 == 3 {
            Err(GenerateError::Invariant(format!("job {i}")))
        } else {
            Ok(i)
        }
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "internal search invariant violated: job 3");
    let ok = run_jobs(&models, (0..9).collect(), 4, |_, i: usize| Ok::<_, GenerateError>(i * 2)).unwrap();
    assert_eq!(ok, (0..9).map(|i| i * 2).collect::<Vec<_>>());
}
