//! The Lambda function: cfn-once's stock providers plus `Custom::BucketPolicy`, writing to the
//! table named by `POLICY_TABLE`.

#[tokio::main]
async fn main() -> Result<(), cfn_once::Error> {
    let table = std::env::var("POLICY_TABLE").unwrap_or_else(|_| "bucket-policies".to_owned());
    cfn_once::Handler::from_env()?
        .provider_with("Custom::BucketPolicy", |sdk| bucket_policy::BucketPolicy::on_dynamodb(sdk, table))
        .with_standard_providers()
        .run()
        .await
}
