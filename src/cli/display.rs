//! What `watch` shows while it waits: an indicatif progress bar at a terminal, plain lines
//! otherwise (a log file, CI, a test reading stderr), where a redrawn bar would be noise.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// indicatif counts in integers; progress may be fractional. Positions are kept in
/// thousandths of a unit.
const SCALE: f64 = 1000.0;

/// One job's progress as `watch` knows it.
#[derive(Debug, Default, Clone)]
pub struct Shown {
    pub progress: Option<f64>,
    pub total: Option<f64>,
    pub message: Option<String>,
    pub eta_ms: Option<u64>,
}

pub enum Display {
    Bar(ProgressBar),
    Lines,
}

impl Display {
    /// A bar when stderr is a terminal, lines otherwise.
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            // Styled before the first tick draws it: indicatif's default bar (an empty `0/0`
            // bar) would flash before the job's first event.
            bar.set_style(spinner());
            bar.set_prefix("connecting");
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            Display::Bar(bar)
        } else {
            Display::Lines
        }
    }

    pub fn show(&self, shown: &Shown) {
        match self {
            Display::Bar(bar) => {
                let (style, prefix) = match (shown.progress, shown.total) {
                    (Some(p), Some(t)) if t > 0.0 => {
                        bar.set_length((t * SCALE) as u64);
                        bar.set_position((p.min(t) * SCALE) as u64);
                        (determinate(), format!("{}/{}", number(p), number(t)))
                    }
                    (Some(p), _) => (spinner(), format!("{} so far", number(p))),
                    _ => (spinner(), "waiting for progress".to_string()),
                };
                bar.set_style(style);
                bar.set_prefix(prefix);
                bar.set_message(message_with_eta(shown));
            }
            Display::Lines => {
                let Some(amount) = amount(shown) else { return };
                eprintln!("progress {amount} {}", message_with_eta(shown));
            }
        }
    }

    /// The job as a snapshot describes it (at the start, or after a reset). As lines it is
    /// not a `progress` line: the steps that led there may be replayed after it.
    pub fn snapshot(&self, status: &str, shown: &Shown) {
        match self {
            Display::Bar(_) => self.show(shown),
            Display::Lines => match amount(shown) {
                Some(amount) => eprintln!("job {status} at {amount} {}", message_with_eta(shown)),
                None => eprintln!("job {status}"),
            },
        }
    }

    /// A line above the bar (or a plain line): logs, connection news.
    pub fn note(&self, text: &str) {
        match self {
            Display::Bar(bar) => bar.println(text),
            Display::Lines => eprintln!("{text}"),
        }
    }

    pub fn finish(&self) {
        if let Display::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

fn amount(shown: &Shown) -> Option<String> {
    let p = shown.progress?;
    Some(match shown.total {
        Some(t) => format!("{}/{}", number(p), number(t)),
        None => number(p),
    })
}

fn determinate() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner:.green} {elapsed:>4} [{wide_bar:.cyan/blue}] {percent:>3}% {prefix}  {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn spinner() -> ProgressStyle {
    ProgressStyle::with_template("{spinner:.green} {elapsed:>4} {prefix}  {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n:.2}")
    }
}

fn message_with_eta(shown: &Shown) -> String {
    let message = shown.message.clone().unwrap_or_default();
    match shown.eta_ms {
        Some(ms) => format!("{message}  (ETA {})", duration(ms)),
        None => message,
    }
}

/// "4.2s", "3m05s", "1h02m"
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_numbers() {
        assert_eq!(duration(4200), "4.2s");
        assert_eq!(duration(185_000), "3m05s");
        assert_eq!(duration(3_720_000), "1h02m");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(2.5), "2.50");
    }
}
