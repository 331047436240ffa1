//! Results: the JSONL file of one [`Record`] per request, written at once and synced in groups,
//! readable after a killed process, resumable, in a versioned schema ([`SCHEMA`]) that reads older
//! files; and the manifest beside it.

mod compact;
mod file;
mod record;
pub mod table;
#[cfg(test)]
mod tests;

pub use file::{
    append_manifest, existing_results, manifest_path, read_manifest, read_records,
    read_records_strict, write_records, RecordWriter, SYNC_INTERVAL,
};
pub use record::{
    failure_kind, load_record, LoadInfo, Method, Record, RecordError, SessionTurn, TwoPointDetail,
    SCHEMA,
};
