//! The environment's proxy variables: which hosts' streams must go through reqwest (and its proxy)
//! rather than the socket-stamped path.

/// The proxy variables of the environment, when one is set: reqwest sends plain-HTTP requests
/// through the proxy, the socket-stamped path would not, so proxied hosts go through reqwest.
#[derive(Clone, Debug)]
pub(super) struct ProxyEnv {
    /// Entries of `NO_PROXY` / `no_proxy`, lower case.
    no_proxy: Vec<String>,
}

impl ProxyEnv {
    pub(super) fn from_env() -> Option<Self> {
        let var = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .into_iter()
            .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))?;
        let no_proxy = ["NO_PROXY", "no_proxy"]
            .into_iter()
            .filter_map(|v| std::env::var(v).ok())
            .flat_map(|v| {
                v.split(',')
                    .map(|e| e.trim().to_ascii_lowercase())
                    .filter(|e| !e.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect();
        tracing::info!(
            "{var} is set: streams to hosts it applies to go through reqwest, stamped by the task"
        );
        Some(ProxyEnv { no_proxy })
    }

    /// Whether requests to `host` go through the proxy: `NO_PROXY` lists neither the host nor a
    /// domain above it, nor `*` (entries reqwest would also match by IP range are taken as not
    /// matching, which errs towards the proxy).
    pub(super) fn applies_to(&self, host: &str) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        !self.no_proxy.iter().any(|e| {
            let e = e.trim_start_matches('.');
            e == "*" || host == e || host.ends_with(&format!(".{e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_lists_hosts_and_domains() {
        let p = ProxyEnv {
            no_proxy: vec!["localhost".into(), ".internal".into(), "10.0.0.5".into()],
        };
        assert!(!p.applies_to("localhost"));
        assert!(!p.applies_to("LOCALHOST"));
        assert!(!p.applies_to("gpu-3.internal"));
        assert!(!p.applies_to("internal"));
        assert!(!p.applies_to("10.0.0.5"));
        assert!(p.applies_to("127.0.0.1"));
        assert!(p.applies_to("notinternal"));
        assert!(!ProxyEnv {
            no_proxy: vec!["*".into()]
        }
        .applies_to("anything"));
    }
}
