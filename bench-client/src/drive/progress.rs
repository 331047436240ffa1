//! The progress line of a long run, on stderr and only on a terminal: requests done of the total,
//! the time so far and left, and what the run is doing now.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A spinner counting a fit's evaluations (`what` names them), on stderr where it is a terminal.
pub fn fit_spinner(what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let template = format!("{{spinner}} {{pos}} {what}, {{elapsed}} so far");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    bar
}

/// A progress bar over `total` requests (`None`: a run that ends by time), hidden unless `show`.
pub(super) fn bar(total: Option<u64>, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = match total {
        Some(_) => "{bar:30} {pos}/{len} requests, {elapsed} so far, about {eta} left; {msg}",
        None => "{spinner} {pos} requests, {elapsed} so far; {msg}",
    };
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
