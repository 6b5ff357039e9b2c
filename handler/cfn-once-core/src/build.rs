//! Which cfn-once this is: the version of the crates and the commit they were built from, for
//! the function's first log line and its metrics, `cfn-once --version`, and the `writer` of the
//! lease records a handler writes (the version only: the records' shape and size do not change
//! from one commit to the next).
//!
//! The commit comes from the crate's build script (`build.rs` at the crate's root): the
//! repository's HEAD when built from a checkout, the build's `CFN_ONCE_COMMIT` variable
//! otherwise, or "unknown" (the published crate). No build time is recorded: two builds of one
//! commit are the same binary.

/// The version of cfn-once, as in its Cargo.toml (one for every crate of the workspace).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit built, the first 12 hex digits, or "unknown".
pub const COMMIT: &str = env!("CFN_ONCE_COMMIT");

/// "0.2.0 (commit <its first 12 hex digits>)": the version and the commit, as `--version` and the logs say.
pub const DESCRIPTION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CFN_ONCE_COMMIT"), ")");

/// [`DESCRIPTION`], for callers that want a function.
pub fn describe() -> &'static str {
    DESCRIPTION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_the_version_and_the_commit() {
        assert_eq!(VERSION, env!("CARGO_PKG_VERSION"));
        assert!(!VERSION.is_empty() && VERSION.split('.').count() == 3, "{VERSION}");
        assert!(
            COMMIT == "unknown" || (COMMIT.len() == 12 && COMMIT.bytes().all(|b| b.is_ascii_hexdigit())),
            "{COMMIT}"
        );
        assert_eq!(describe(), format!("{VERSION} (commit {COMMIT})"));
    }
}
