//! The provider test kit: run a provider through the real protocol (the worker, the decision
//! table, the lease store, response building) in memory, on a manual clock, without AWS.
//! Re-exported from `cfn_once_core::testing` (see [`ProviderTest`]), with what tests compare
//! answers with, so a test imports from here and from [`crate::prelude`] only.
//!
//! ```
//! use cfn_once::prelude::*;
//! use cfn_once::testing::{FencedMap, ProviderTest};
//! use serde_json::json;
//!
//! // A provider that keeps one item per resource in a fenced, owned table.
//! struct Notes(std::sync::Arc<FencedMap>);
//!
//! #[async_trait]
//! impl Provider for Notes {
//!     type Properties = serde_json::Value;
//!     const UPDATE_THROUGH_CREATE: bool = true;
//!
//!     async fn create(&self, ctx: &ProviderContext, properties: Self::Properties) -> Result<Step, ProviderError> {
//!         let key = properties["Key"].as_str().unwrap_or("note").to_owned();
//!         self.0.put(&ctx.owned(), &key, properties["Text"].clone()).map_err(FencedWriteError::from)?;
//!         Ok(ProviderOutput::with_id(format!("note:{key}")).into())
//!     }
//!
//!     async fn delete(&self, ctx: &ProviderContext, id: &str, _: Self::Properties) -> Result<Step<()>, ProviderError> {
//!         self.0.delete(&ctx.owned(), id.trim_start_matches("note:")).map_err(FencedWriteError::from)?;
//!         Ok(Step::Done(()))
//!     }
//! }
//!
//! let table = std::sync::Arc::new(FencedMap::new());
//! table.insert_unowned("precious", json!("kept"));
//! let mut kit = ProviderTest::new().provider("Custom::Note", Notes(table.clone()));
//! let refused = kit.create("Custom::Note", json!({"Key": "precious", "Text": "mine"}));
//! assert_eq!(refused.status(), Some(Status::Failed), "another's item is never overwritten");
//! let rollback = kit.delete("Custom::Note", refused.physical_resource_id(), json!({"Key": "precious"}));
//! assert_eq!(rollback.status(), Some(Status::Success));
//! assert_eq!(table.get("precious"), Some(json!("kept")), "nor deleted by the rollback");
//! ```

pub use cfn_once_core::ownership::{Deleted, Owner, WriteRefused, WriteRules, Written};
pub use cfn_once_core::request::RequestKind;
pub use cfn_once_core::response::{ResponseBody, Status};
pub use cfn_once_core::testing::*;
pub use cfn_once_core::vocabulary::{Disposition, Done};
