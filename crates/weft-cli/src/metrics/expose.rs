//! A scrape as data and its exposition: [`Family`]s of [`Sample`]s, each family named by
//! a declared [`MetricDef`], encoded in the OpenMetrics text format by `prometheus-client`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use weft_rpc::metric::{MetricDef, MetricKind};

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels of one sample: name and value pairs.
pub type Labels = Vec<(&'static str, String)>;

/// One sample's value.
#[derive(Debug, Clone)]
pub enum Value {
    /// A counter's or gauge's figure.
    Int(u64),
    /// A latency histogram: sum of seconds, count and per-bucket (not cumulative) counts
    /// by upper bound, the last one `f64::INFINITY` (`+Inf`).
    Histogram {
        /// Seconds in all.
        sum: f64,
        /// Observations in all.
        count: u64,
        /// `(upper bound, count)` per bucket.
        buckets: Vec<(f64, u64)>,
    },
}

/// One labelled sample of a family.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its labels.
    pub labels: Labels,
    /// Its value.
    pub value: Value,
}

/// One metric family as of a scrape.
#[derive(Debug, Clone)]
pub struct Family {
    /// The family name (the declaration's metric name under a role's prefix).
    pub name: String,
    /// The declaration.
    pub def: MetricDef,
    /// Its samples (none is fine: the family is still described).
    pub samples: Vec<Sample>,
}

impl Family {
    /// An empty family for `def` under `prefix`.
    pub fn new(prefix: &str, def: &MetricDef) -> Self {
        Self {
            name: def.family(prefix),
            def: *def,
            samples: Vec::new(),
        }
    }

    /// Adds a sample with a plain figure.
    pub fn push(&mut self, labels: Labels, value: u64) {
        self.samples.push(Sample {
            labels,
            value: Value::Int(value),
        });
    }
}

/// A label value with the characters the text format escapes replaced.
pub fn label_value(v: &str) -> String {
    v.replace(['\\', '"', '\n'], "_")
}

/// The families of one scrape, handed to `prometheus-client` as a collector.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let kind = match f.def.kind {
                MetricKind::Counter => MetricType::Counter,
                MetricKind::Gauge => MetricType::Gauge,
                MetricKind::Histogram => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(&f.name, f.def.help, None, kind)?;
            for s in &f.samples {
                let mut e = metric.encode_family(&s.labels)?;
                match (&s.value, f.def.kind) {
                    (Value::Int(v), MetricKind::Counter) => {
                        e.encode_counter::<NoLabelSet, u64, u64>(v, None)?;
                    }
                    (Value::Int(v), _) => e.encode_gauge(&i64::try_from(*v).unwrap_or(i64::MAX))?,
                    (
                        Value::Histogram {
                            sum,
                            count,
                            buckets,
                        },
                        _,
                    ) => {
                        e.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The OpenMetrics text of `families`, ending with `# EOF`.
pub fn encode(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        // Writing to a String fails only if an encoder refuses a value.
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_as_prometheus_text_a_real_parser_reads() {
        let defs = [
            MetricDef::new("c", "A counter.", MetricKind::Counter),
            MetricDef::new("g", "A gauge.", MetricKind::Gauge),
            MetricDef::new("h_seconds", "A histogram.", MetricKind::Histogram),
        ];
        let mut c = Family::new("t", &defs[0]);
        c.push(vec![("op", label_value("a\"b"))], 3);
        let mut g = Family::new("t", &defs[1]);
        g.push(vec![], 7);
        let mut h = Family::new("t", &defs[2]);
        h.samples.push(Sample {
            labels: vec![("op", "x".into())],
            value: Value::Histogram {
                sum: 0.5,
                count: 3,
                buckets: vec![(1e-6, 1), (2e-6, 0), (f64::INFINITY, 2)],
            },
        });
        let text = encode(vec![c, g, h]);
        assert!(text.contains("# TYPE t_c counter\n"), "{text}");
        assert!(text.contains("t_c_total{op=\"a_b\"} 3\n"), "{text}");
        assert!(text.contains("t_g 7\n"), "{text}");
        assert!(
            text.contains("t_h_seconds_bucket{le=\"+Inf\",op=\"x\"} 3\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
