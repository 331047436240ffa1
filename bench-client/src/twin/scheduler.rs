//! Whose scheduler a table's server runs: vLLM's, TensorRT-LLM's and llama.cpp's mix prefill and
//! decode in one pass under a token budget; SGLang's runs a prefill pass or a decode step.

use crate::results::table::TableRow;

/// Whether a server of this `backend` name runs prefill and decode in one pass under a token
/// budget (vLLM's, TensorRT-LLM's in-flight batching, llama.cpp's continuous batching): `Some(true)`;
/// SGLang's prefill pass or decode step: `Some(false)`; another name: `None`. Case, dots,
/// dashes and underscores do not count (`TensorRT-LLM`, `trt_llm`, `llama.cpp`).
pub fn mixed_passes(backend: &str) -> Option<bool> {
    let name: String = backend
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    match name.as_str() {
        "vllm" | "trtllm" | "tensorrtllm" | "llamacpp" => Some(true),
        "sglang" => Some(false),
        _ => None,
    }
}

/// The scheduler of a table's rows (whether passes are mixed, and what said so): `flag` where
/// given, else the rows' `backend` column where every row names one known server, else SGLang's
/// (with a note on standard error where the column names another).
pub fn rows_scheduler(rows: &[TableRow], flag: Option<bool>) -> (bool, &'static str) {
    if let Some(mixed) = flag {
        return (mixed, "--backend");
    }
    let mut named: Vec<String> = rows
        .iter()
        .map(|r| r.backend.as_deref().unwrap_or("").trim().to_string())
        .collect();
    named.sort_by_key(|b| b.to_ascii_lowercase());
    named.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
    let known: Vec<Option<bool>> = named.iter().map(|b| mixed_passes(b)).collect();
    match known.as_slice() {
        [Some(true)] => (true, "the table's backend column (mixed passes)"),
        [Some(false)] => (false, "the table's backend column (sglang)"),
        _ => {
            if named != [""] {
                let shown: Vec<&str> = named
                    .iter()
                    .map(|b| if b.is_empty() { "(blank)" } else { b.as_str() })
                    .collect();
                eprintln!(
                    "note: the backend column holds {}, not one server of sglang, vllm, trtllm or llama.cpp: SGLang's scheduler is assumed (--backend picks one)",
                    shown.join(", ")
                );
            }
            (
                false,
                "SGLang (no --backend, no single backend in the table)",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(backends: &[Option<&str>]) -> Vec<TableRow> {
        backends
            .iter()
            .enumerate()
            .map(|(i, b)| TableRow {
                line: i as u64 + 2,
                deployment: None,
                backend: b.map(str::to_string),
                isl: 1024,
                osl: 128,
                concurrency: 1 << i,
                ttft_ms: Some(50.0),
                tpot_ms: Some(5.0),
            })
            .collect()
    }

    #[test]
    fn a_backend_name_says_whether_passes_mix() {
        for b in [
            "vllm",
            "vLLM",
            "trtllm",
            "TensorRT-LLM",
            "trt_llm",
            "llama.cpp",
        ] {
            assert_eq!(mixed_passes(b), Some(true), "{b}");
        }
        for b in ["sglang", "SGLang"] {
            assert_eq!(mixed_passes(b), Some(false), "{b}");
        }
        for b in ["", "tgi", "vllm-sglang"] {
            assert_eq!(mixed_passes(b), None, "{b}");
        }
    }

    #[test]
    fn the_rows_scheduler_is_the_flag_else_one_known_backend_else_sglang_s() {
        let trt = rows(&[Some("trtllm"), Some("TRTLLM")]);
        assert!(rows_scheduler(&trt, None).0);
        assert!(!rows_scheduler(&trt, Some(false)).0);
        assert!(!rows_scheduler(&rows(&[Some("SGLang"), Some("sglang")]), None).0);
        // Two servers, an unknown one, or none named: SGLang's.
        assert!(!rows_scheduler(&rows(&[Some("vllm"), Some("sglang")]), None).0);
        assert!(!rows_scheduler(&rows(&[Some("vllm"), None]), None).0);
        assert!(!rows_scheduler(&rows(&[Some("tgi")]), None).0);
        assert!(!rows_scheduler(&rows(&[None, None]), None).0);
        assert!(rows_scheduler(&rows(&[None]), Some(true)).0);
    }
}
