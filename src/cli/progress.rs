//! The progress bar of a long run (`translate --output`, `score`) on a terminal: done/total,
//! the rate and the time left, in a line of fixed width.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A bar on stderr counting `unit` (plural), out of `total` when it is known; hidden unless
/// `shown`.
pub fn bar(shown: bool, total: Option<u64>, unit: &'static str) -> ProgressBar {
    if !shown {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = if total.is_some() {
        format!("{{elapsed_precise}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit}  {{rate}}  ETA {{eta}}")
    } else {
        format!("{{elapsed_precise}} {{spinner}} {{human_pos}} {unit}  {{rate}}")
    };
    let style = ProgressStyle::with_template(&template).map(|s| {
        s.progress_chars("=> ").with_key("rate", move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}/s", rate(state.per_sec()));
        })
    });
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// A rate with as many digits as help: `1234`, `56.7`, `0.89`.
pub fn rate(per_sec: f64) -> String {
    match per_sec {
        r if !r.is_finite() || r <= 0.0 => "0".to_string(),
        r if r >= 100.0 => format!("{r:.0}"),
        r if r >= 10.0 => format!("{r:.1}"),
        r => format!("{r:.2}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_print_with_sensible_precision() {
        assert_eq!(super::rate(247.0835), "247");
        assert_eq!(super::rate(12.345), "12.3");
        assert_eq!(super::rate(0.8912), "0.89");
        assert_eq!(super::rate(f64::NAN), "0");
    }
}
