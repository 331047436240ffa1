//! Reports: statistics over records (sweep points, load summaries, the server's `/metrics`
//! changes), merged exactly across files, the comparison of two runs, and the exporters that turn them into tables, JSON, CSV
//! and plots (one file per format in `export/`).

pub mod cache;
pub mod calibrate;
pub mod compare;
pub mod export;
pub mod gate;
pub mod grid;
pub mod load;
pub mod server_metrics;
pub mod sweep;
pub mod turns;
pub mod twin_table;

pub use load::{merge_files, LoadSummary, Slo};
pub use server_metrics::{MergedMetrics, MetricsDelta};
pub use sweep::{PointData, Report, Summary};
