//! Results: the JSONL file of one [`Record`] per request, written at once and synced in groups,
//! readable after a killed process, resumable, in a versioned schema ([`SCHEMA`]) that reads older
//! files; and the manifest beside it.

mod compact;
mod figures;
mod file;
mod identity;
mod lock;
pub mod manifest;
mod record;
pub mod settings;
pub mod table;
#[cfg(test)]
mod tests;

pub use figures::Figures;
pub use file::{
    append_manifest, each_record, each_record_strict, existing_results, manifest_path, not_a_file,
    not_in_a_folder, read_manifest, read_manifests, read_records, read_records_strict,
    write_records, RecordWriter, SYNC_INTERVAL,
};
pub use identity::{ForeignRun, NotOneRun, OneRun, RequestKey};
pub use lock::{lock_results, ResultsBusy, ResultsLock};
pub use manifest::Manifest;
pub use record::{
    load_record, load_record_measured, ErrorKind, LoadInfo, Method, Record, RecordError,
    SessionTurn, TwoPointDetail, SCHEMA,
};
