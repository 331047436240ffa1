//! Results: the JSONL file of one [`Record`] per request, appended and synced at once, readable
//! after a killed process, resumable; and the manifest beside it.

mod file;
mod record;
#[cfg(test)]
mod tests;

pub use file::{
    append_manifest, existing_results, manifest_path, read_manifest, read_records,
    read_records_strict, RecordWriter,
};
pub use record::{
    failure_kind, load_record, LoadInfo, Method, Record, RecordError, TwoPointDetail,
};
