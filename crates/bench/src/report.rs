//! The table: rows from every scenario, printed as text and written as Markdown.

use std::fmt::Write as _;

/// Whether a figure meets its target. Quick runs judge nothing (their counts are too small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    /// A figure with no target, or a quick run.
    Info,
    Skipped,
}

impl Verdict {
    pub fn of(met: bool) -> Self {
        if met { Verdict::Met } else { Verdict::NotMet }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "NOT met",
            Verdict::Info => "",
            Verdict::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub metric: String,
    pub bridge: String,
    /// The floor (direct) or a peer's figure, named in `against`.
    pub reference: String,
    pub against: String,
    pub ratio: String,
    pub target: String,
    pub verdict: Verdict,
    /// Which part of a two-part target was missed, shown after "NOT met".
    pub missed: String,
}

impl Row {
    pub fn new(scenario: &str, metric: &str, bridge: impl Into<String>) -> Self {
        Self {
            scenario: scenario.into(),
            metric: metric.into(),
            bridge: bridge.into(),
            reference: String::new(),
            against: String::new(),
            ratio: String::new(),
            target: String::new(),
            verdict: Verdict::Info,
            missed: String::new(),
        }
    }

    pub fn vs(
        mut self,
        against: &str,
        reference: impl Into<String>,
        ratio: impl Into<String>,
    ) -> Self {
        self.against = against.into();
        self.reference = reference.into();
        self.ratio = ratio.into();
        self
    }

    pub fn target(mut self, target: &str, met: bool) -> Self {
        self.target = target.into();
        self.verdict = Verdict::of(met);
        self
    }

    /// A target in parts (`(met, what)`): met when every part is; otherwise the verdict names
    /// the parts missed.
    pub fn target_parts(mut self, target: &str, parts: &[(bool, &str)]) -> Self {
        self.target = target.into();
        self.verdict = Verdict::of(parts.iter().all(|(met, _)| *met));
        self.missed = parts
            .iter()
            .filter(|(met, _)| !met)
            .map(|(_, what)| *what)
            .collect::<Vec<_>>()
            .join(", ");
        self
    }

    pub fn skipped(scenario: &str, reason: impl Into<String>) -> Self {
        let mut row = Row::new(scenario, "skipped", reason.into());
        row.verdict = Verdict::Skipped;
        row
    }
}

const HEADERS: [&str; 7] = [
    "scenario", "metric", "bridge", "against", "ratio", "target", "verdict",
];

fn cells(row: &Row, judge: bool) -> [String; 7] {
    let against = match (row.against.is_empty(), row.reference.is_empty()) {
        (true, _) => String::new(),
        (false, true) => row.against.clone(),
        (false, false) => format!("{}: {}", row.against, row.reference),
    };
    let verdict = if judge || row.verdict == Verdict::Skipped {
        match (row.verdict, row.missed.is_empty()) {
            (Verdict::NotMet, false) => format!("NOT met ({})", row.missed),
            (v, _) => v.label().to_string(),
        }
    } else {
        String::new()
    };
    [
        row.scenario.clone(),
        row.metric.clone(),
        row.bridge.clone(),
        against,
        row.ratio.clone(),
        row.target.clone(),
        verdict,
    ]
}

/// A plain-text table for the terminal.
pub fn text(rows: &[Row], judge: bool) -> String {
    let all: Vec<[String; 7]> = rows.iter().map(|r| cells(r, judge)).collect();
    let mut widths = HEADERS.map(|h| h.chars().count());
    for r in &all {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cols: &[String]| {
        for (i, (c, w)) in cols.iter().zip(widths.iter()).enumerate() {
            let pad = w - c.chars().count();
            let _ = write!(
                out,
                "{}{c}{}",
                if i == 0 { "" } else { "  " },
                " ".repeat(pad)
            );
        }
        out.push('\n');
    };
    line(&mut out, &HEADERS.map(String::from));
    line(&mut out, &widths.map(|w| "-".repeat(w)));
    for r in &all {
        line(&mut out, r);
    }
    out
}

/// The same table in Markdown.
pub fn markdown(rows: &[Row], judge: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(HEADERS.len()));
    for r in rows {
        let c = cells(r, judge).map(|c| c.replace('|', "\\|"));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}
