//! The Lambda function: cfn-once's stock providers plus `Custom::BucketPolicy`, writing to the
//! table the deployment names in `POLICY_TABLE` (the regional template's `ProviderEnvironment`).

#[tokio::main]
async fn main() -> Result<(), cfn_once::Error> {
    cfn_once::Handler::from_env()?
        .provider_with("Custom::BucketPolicy", bucket_policy::BucketPolicy::on_dynamodb)
        .with_standard_providers()
        .run()
        .await
}
