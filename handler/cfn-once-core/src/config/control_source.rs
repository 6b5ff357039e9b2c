//! `CFN_ONCE_CONTROL`'s sources: the lease table's control item, or an ARC routing control
//! read from the cluster's endpoints (`CFN_ONCE_ARC_ENDPOINTS`).

/// Where a primary learns whether it is the active region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlSource {
    /// The `control#active` item in the lease table (strongly consistent, no extra cost).
    Table,
    /// An ARC routing control for this region, read from the cluster's endpoints in rotation.
    Arc {
        /// `CFN_ONCE_ARC_ENDPOINTS`: `region=url` pairs, comma-separated.
        endpoints: Vec<ArcEndpoint>,
        /// `CFN_ONCE_ARC_ROUTING_CONTROL_ARN`: this region's routing control.
        routing_control_arn: String,
    },
}

/// One ARC cluster endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcEndpoint {
    /// The region the endpoint is in, which calls to it are signed for.
    pub region: String,
    /// The endpoint's URL: https, or plain http on loopback for local stand-ins.
    pub url: String,
}

impl ArcEndpoint {
    /// Parses `CFN_ONCE_ARC_ENDPOINTS`: `us-east-1=https://...,ap-southeast-2=https://...`.
    /// Plain http is accepted only on loopback, for local stand-ins.
    pub fn parse_list(entries: &[String]) -> Result<Vec<Self>, String> {
        let acceptable = |url: &str| {
            url.starts_with("https://") || url.starts_with("http://127.0.0.1:") || url.starts_with("http://localhost:")
        };
        entries
            .iter()
            .map(|entry| match entry.split_once('=') {
                Some((region, url)) if !region.trim().is_empty() && acceptable(url.trim()) => {
                    Ok(Self { region: region.trim().to_owned(), url: url.trim().to_owned() })
                }
                _ => Err(format!("CFN_ONCE_ARC_ENDPOINTS entry {entry:?} is not region=https://endpoint")),
            })
            .collect()
    }
}
