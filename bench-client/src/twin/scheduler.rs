//! Whose scheduler a table's server runs: vLLM's, TensorRT-LLM's and llama.cpp's mix prefill and
//! decode in one pass under a token budget; SGLang's runs a prefill pass or a decode step. And the
//! prefill tokens a pass its launch takes by default on the table's accelerator.

use crate::results::table::TableRow;

/// A server's name as the rules below read it: lower case, letters and digits only
/// (`TensorRT-LLM` is `tensorrtllm`, `llama.cpp` is `llamacpp`).
fn server_name(backend: &str) -> String {
    backend
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Whether a server of this `backend` name runs prefill and decode in one pass under a token
/// budget (vLLM's, TensorRT-LLM's in-flight batching, llama.cpp's continuous batching): `Some(true)`;
/// SGLang's prefill pass or decode step: `Some(false)`; another name: `None`. Case, dots,
/// dashes and underscores do not count (`TensorRT-LLM`, `trt_llm`, `llama.cpp`).
pub fn mixed_passes(backend: &str) -> Option<bool> {
    match server_name(backend).as_str() {
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

/// An accelerator's memory in GiB, for the names the servers' defaults below tell apart: a word
/// of the name (`h100_sxm`, `NVIDIA H200`, `B200`), any case; `None` for another.
pub fn gpu_memory_gib(gpu: &str) -> Option<u32> {
    const KNOWN: &[(&str, u32)] = &[
        ("a10", 24),
        ("a10g", 24),
        ("l4", 24),
        ("l40", 48),
        ("l40s", 48),
        ("a100", 80),
        ("h100", 80),
        ("h800", 80),
        ("h20", 96),
        ("gh200", 96),
        ("h200", 141),
        ("b200", 180),
        ("gb200", 186),
        ("b300", 288),
        ("gb300", 279),
        ("mi300x", 192),
        ("mi325x", 256),
        ("mi355x", 288),
    ];
    let lower = gpu.to_ascii_lowercase();
    let joined: String = lower.chars().filter(char::is_ascii_alphanumeric).collect();
    if joined.contains("rtxpro6000") {
        return Some(96);
    }
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|w| KNOWN.iter().find(|(n, _)| *n == w).map(|&(_, g)| g))
}

/// The prefill tokens a pass a server of `backend` takes on `gpu` when its launch does not set
/// them: SGLang's `chunked_prefill_size` (2,048 under 35 GiB, 8,192 under 160 GiB, else 16,384),
/// vLLM's API server's `max_num_batched_tokens` (8,192 from 70 GiB but on an A100, else 2,048).
/// `None` for another server or an accelerator not in [`gpu_memory_gib`].
pub fn default_chunk(backend: &str, gpu: &str) -> Option<usize> {
    let gib = gpu_memory_gib(gpu)?;
    match server_name(backend).as_str() {
        "sglang" => Some(match gib {
            ..35 => 2048,
            35..160 => 8192,
            _ => 16384,
        }),
        "vllm" => Some(if gib >= 70 && !gpu.to_ascii_lowercase().contains("a100") {
            8192
        } else {
            2048
        }),
        _ => None,
    }
}

/// The prefill tokens a pass of a table's server, where its launch did not set them: the default
/// of `backend` (else of the one server the rows' `backend` column names) on the one accelerator
/// their `gpu` column names ([`default_chunk`]), with what said so; `None` where they name none,
/// several, or one without a known default.
pub fn rows_chunk(rows: &[TableRow], backend: Option<&str>) -> Option<(usize, String)> {
    let one = |of: fn(&TableRow) -> Option<&str>| {
        let first = of(rows.first()?)?.trim();
        rows.iter()
            .all(|r| of(r).is_some_and(|v| v.trim().eq_ignore_ascii_case(first)))
            .then_some(first)
    };
    let backend = match backend {
        Some(b) => b,
        None => one(|r| r.backend.as_deref())?,
    };
    let gpu = one(|r| r.gpu.as_deref())?;
    let chunk = default_chunk(backend, gpu)?;
    Some((
        chunk,
        format!(
            "{backend}'s default on {gpu} ({} GiB)",
            gpu_memory_gib(gpu).unwrap_or_default()
        ),
    ))
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
                gpu: None,
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

    #[test]
    fn an_accelerator_s_memory_is_read_from_a_word_of_its_name() {
        for (name, gib) in [
            ("h100_sxm", Some(80)),
            ("NVIDIA H200", Some(141)),
            ("B200", Some(180)),
            ("gb200", Some(186)),
            ("h20", Some(96)),
            ("b300_sxm", Some(288)),
            ("NVIDIA RTX PRO 6000 Blackwell", Some(96)),
            ("l40s", Some(48)),
            ("h2000", None),
            ("tpu-v5e", None),
            ("", None),
        ] {
            assert_eq!(gpu_memory_gib(name), gib, "{name}");
        }
    }

    #[test]
    fn the_default_chunk_is_the_server_s_for_the_accelerator_s_memory() {
        for (backend, gpu, chunk) in [
            ("sglang", "h100_sxm", Some(8192)),
            ("SGLang", "h200_sxm", Some(8192)),
            ("sglang", "b200_sxm", Some(16384)),
            ("sglang", "b300_sxm", Some(16384)),
            ("sglang", "l4", Some(2048)),
            ("vllm", "h100_sxm", Some(8192)),
            ("vLLM", "b200_sxm", Some(8192)),
            ("vllm", "a100", Some(2048)),
            ("vllm", "l40s", Some(2048)),
            ("trtllm", "h100_sxm", None),
            ("sglang", "tpu", None),
        ] {
            assert_eq!(default_chunk(backend, gpu), chunk, "{backend} on {gpu}");
        }
    }

    #[test]
    fn the_rows_chunk_needs_one_server_and_one_accelerator() {
        let on = |cells: &[(Option<&str>, Option<&str>)]| -> Vec<TableRow> {
            let mut r = rows(&vec![None; cells.len()]);
            for (row, (b, g)) in r.iter_mut().zip(cells) {
                row.backend = b.map(str::to_string);
                row.gpu = g.map(str::to_string);
            }
            r
        };
        let b200 = on(&[
            (Some("sglang"), Some("b200_sxm")),
            (Some("SGLang"), Some("B200_SXM")),
        ]);
        let (chunk, why) = rows_chunk(&b200, None).expect("one server on one accelerator");
        assert_eq!(chunk, 16384);
        assert!(why.contains("sglang") && why.contains("b200_sxm"), "{why}");
        // --backend names the server where the column does not.
        assert_eq!(rows_chunk(&b200, Some("vllm")).map(|c| c.0), Some(8192));
        let no_backend = on(&[(None, Some("h100_sxm")), (None, Some("h100_sxm"))]);
        assert_eq!(rows_chunk(&no_backend, None), None);
        assert_eq!(
            rows_chunk(&no_backend, Some("sglang")).map(|c| c.0),
            Some(8192)
        );
        // Two accelerators, a row without one, or one without a known default: none.
        let two = on(&[
            (Some("sglang"), Some("h100_sxm")),
            (Some("sglang"), Some("b200_sxm")),
        ]);
        assert_eq!(rows_chunk(&two, None), None);
        let blank = on(&[(Some("sglang"), Some("h100_sxm")), (Some("sglang"), None)]);
        assert_eq!(rows_chunk(&blank, None), None);
        let trt = on(&[(Some("trtllm"), Some("h100_sxm"))]);
        assert_eq!(rows_chunk(&trt, None), None);
    }
}
