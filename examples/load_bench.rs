//! Checkpoint load time against the time to read the file.
//! Usage: load_bench CHECKPOINT [REPEATS]   (see bench/load.sh)
//!
//! Reports the median of REPEATS (default 3) runs of: reading every byte of the file
//! (`std::fs::read`, warm page cache), and `tchseq::checkpoint::load_checkpoint` (container,
//! pickle, config, upgrades, every model tensor materialised).

use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().ok_or("usage: load_bench CHECKPOINT [REPEATS]")?);
    let repeats: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(3).max(1);
    let size = std::fs::metadata(&path)?.len();
    let _warm = std::fs::read(&path)?;
    drop(_warm);
    let mut read = Vec::new();
    let mut load = Vec::new();
    let mut tensors = 0;
    for _ in 0..repeats {
        let t = Instant::now();
        let bytes = std::fs::read(&path)?;
        read.push(t.elapsed().as_secs_f64());
        drop(bytes);
        let t = Instant::now();
        let ckpt = tchseq::checkpoint::load_checkpoint(&path)?;
        load.push(t.elapsed().as_secs_f64());
        tensors = ckpt.state_dict.len();
    }
    let (r, l) = (median(read), median(load));
    println!(
        "{}: {:.1} MB, {tensors} tensors; read {:.3}s, load_checkpoint {:.3}s = {:.2}x the read time (median of {repeats})",
        path.display(),
        size as f64 / 1e6,
        r,
        l,
        l / r
    );
    Ok(())
}
