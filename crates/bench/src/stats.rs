//! Percentiles over latency samples, and the small helpers every scenario shares.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in microseconds: the clock `bench_progress` stamps its messages with. Upstream,
/// bridge and readers run on this one machine, so they read the same clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The send time `bench_progress` put in a progress message (`sent_at_us=T`).
pub fn sent_at_us(text: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"sent_at_us=";
    let start = text.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = text[start..].iter().take_while(|b| b.is_ascii_digit());
    let mut value: u64 = 0;
    let mut any = false;
    for d in digits {
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

/// Latency samples in microseconds, summarised by nearest-rank percentiles.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<u64>);

#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub count: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Samples {
    pub fn push(&mut self, us: u64) {
        self.0.push(us);
    }

    pub fn extend(&mut self, other: impl IntoIterator<Item = u64>) {
        self.0.extend(other);
    }

    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    pub fn count(&self) -> usize {
        self.0.len()
    }

    pub fn summary(&self) -> Option<Summary> {
        if self.0.is_empty() {
            return None;
        }
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            let rank = (q * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1]
        };
        Some(Summary {
            count: sorted.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: *sorted.last().unwrap_or(&0),
        })
    }
}

/// Microseconds as milliseconds with three decimals, the unit of every latency in the table.
pub fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

pub fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        return "—".into();
    }
    format!("{:.2}×", a as f64 / b as f64)
}

/// `a / b` as a ratio of two measured figures.
pub fn ratio_f(a: f64, b: f64) -> String {
    if b <= 0.0 {
        return "—".into();
    }
    format!("{:.2}×", a / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut s = Samples::default();
        s.extend(1..=100);
        let sum = s.summary().unwrap();
        assert_eq!((sum.p50, sum.p99, sum.max, sum.count), (50, 99, 100, 100));
    }

    #[test]
    fn reads_the_send_time() {
        assert_eq!(sent_at_us(b"{\"message\":\"sent_at_us=123\"}"), Some(123));
        assert_eq!(sent_at_us(b"step 1"), None);
    }
}
