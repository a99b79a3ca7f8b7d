//! A repository's store, opened from its [`RepoSpec`]: one `object_store` crate for S3
//! (and S3-compatible servers, with `--endpoint` and path-style addressing), Google Cloud
//! Storage, Azure Blob Storage and a local directory (`file:///DIR`, so anyone can try a
//! repository with no cloud account).
//!
//! Credentials come from the process's environment, as each store's SDK reads them
//! (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, web identity, instance
//! metadata; `GOOGLE_SERVICE_ACCOUNT`...; `AZURE_STORAGE_ACCOUNT_NAME`/`..._KEY`...). The
//! spec never holds them, so the MGS never stores them and nothing prints them.
//! `--endpoint` names an S3-compatible server's URL, or an Azure account's
//! (`http://127.0.0.1:10000/devstoreaccount1` for the Azurite emulator).

use crate::error::RepoError;
use crate::meta::KeyStyle;
use object_store::ObjectStore;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use std::sync::Arc;
use std::time::Duration;
use weft_proto::hsm::RepoSpec;

/// Retries of one store request (throttling, 5xx, broken connections) before its error
/// reaches the caller, and the longest time they may take.
pub const STORE_RETRIES: usize = 4;
/// See [`STORE_RETRIES`].
pub const STORE_RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// A repository's store and the prefix its objects live under.
#[derive(Clone)]
pub struct RepoStore {
    store: Arc<dyn ObjectStore>,
    /// The same store's page-by-page listing, where it has one (S3, GCS): lets a listing
    /// ask for pages larger than the default.
    pages: Option<Arc<dyn PaginatedListStore>>,
    prefix: Path,
    url: String,
    /// For `s3://`: the store's credentials and region, which the bucket's event queue
    /// ([`crate::events`]) is reached with too.
    aws: Option<AwsAccess>,
    /// For `az://`: the account and key its container's event queue is reached with.
    azure: Option<AzureAccess>,
    /// How the store spells FSx's metadata keys.
    key_style: KeyStyle,
}

/// How an `az://` repository reaches its account's other services (the storage queue its
/// container's events go to): the container, the account and its Shared Key, from the
/// same environment the store reads (`AZURE_STORAGE_ACCOUNT_NAME`, `..._KEY`).
#[derive(Clone)]
pub struct AzureAccess {
    /// The container (the URL's host).
    pub container: String,
    /// The storage account.
    pub account: String,
    /// The account's key (base64), if the environment gives one: queues are reached with
    /// Shared Key only.
    pub key: Option<String>,
}

impl std::fmt::Debug for AzureAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureAccess")
            .field("container", &self.container)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// How an `s3://` repository reaches AWS services: its bucket, the credential chain its
/// store built (environment, profile, web identity, instance metadata) and its region.
#[derive(Clone, Debug)]
pub struct AwsAccess {
    /// The bucket (the URL's host).
    pub bucket: String,
    /// The store's credential provider.
    pub credentials: object_store::aws::AwsCredentialProvider,
    /// The store's region.
    pub region: String,
}

impl std::fmt::Debug for RepoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RepoStore {
    /// Opens the store `spec` names. Does not reach it: [`RepoStore::check`] does.
    pub fn open(spec: &RepoSpec) -> Result<Self, RepoError> {
        let url = url::Url::parse(&spec.url)
            .map_err(|e| RepoError::Spec(format!("{:?} is not a URL: {e}", spec.url)))?;
        let bad = |what: &str| RepoError::Spec(format!("{}: {what}", spec.url));
        let prefix = Path::parse(url.path().trim_start_matches('/'))
            .map_err(|e| bad(&format!("bad prefix: {e}")))?;
        let retry = object_store::RetryConfig {
            max_retries: STORE_RETRIES,
            retry_timeout: STORE_RETRY_TIMEOUT,
            ..Default::default()
        };
        type Opened = (
            Arc<dyn ObjectStore>,
            Option<Arc<dyn PaginatedListStore>>,
            Path,
        );
        let mut aws = None;
        let mut azure = None;
        let mut key_style = KeyStyle::Fsx;
        let (store, pages, prefix): Opened = match url.scheme() {
            "s3" => {
                let bucket = url.host_str().ok_or_else(|| bad("no bucket"))?;
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry);
                if let Some(endpoint) = &spec.endpoint {
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let Some(region) = &spec.region {
                    b = b.with_region(region);
                }
                b = b.with_virtual_hosted_style_request(!spec.path_style);
                let region = b
                    .get_config_value(&object_store::aws::AmazonS3ConfigKey::Region)
                    .unwrap_or_else(|| "us-east-1".to_string());
                let s = Arc::new(b.build().map_err(|e| bad(&e.to_string()))?);
                aws = Some(AwsAccess {
                    bucket: bucket.to_string(),
                    credentials: s.credentials().clone(),
                    region,
                });
                (s.clone(), Some(s), prefix)
            }
            "gs" => {
                let bucket = url.host_str().ok_or_else(|| bad("no bucket"))?;
                let s = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(&e.to_string()))?;
                let s = Arc::new(s);
                (s.clone(), Some(s), prefix)
            }
            "az" => {
                let container = url.host_str().ok_or_else(|| bad("no container"))?;
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .with_retry(retry);
                // The account's URL, for an emulator or a private endpoint
                // (`http://127.0.0.1:10000/devstoreaccount1` for Azurite).
                if let Some(endpoint) = &spec.endpoint {
                    b = b
                        .with_endpoint(endpoint.clone())
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                use object_store::azure::AzureConfigKey;
                azure = Some(AzureAccess {
                    container: container.to_string(),
                    account: b
                        .get_config_value(&AzureConfigKey::AccountName)
                        .unwrap_or_default(),
                    key: b.get_config_value(&AzureConfigKey::AccessKey),
                });
                let s = b.build().map_err(|e| bad(&e.to_string()))?;
                key_style = KeyStyle::Identifiers;
                (Arc::new(s), None, prefix)
            }
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(bad("file:// URLs name a local directory: file:///DIR"));
                }
                let dir = url
                    .to_file_path()
                    .map_err(|()| bad("not a local directory"))?;
                let s = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(&e.to_string()))?;
                (Arc::new(s), None, Path::default())
            }
            other => return Err(bad(&format!("{other}:// is not a supported store"))),
        };
        Ok(Self {
            store,
            pages,
            prefix,
            url: spec.url.clone(),
            aws,
            azure,
            key_style,
        })
    }

    /// Checks that the store answers with these credentials (a listing of at most one
    /// object under the prefix): a missing bucket or refused credentials is an error here,
    /// at `weft repo create`, not at the first read.
    pub async fn check(&self) -> Result<(), RepoError> {
        use futures::StreamExt;
        let mut listing = self.store.list(Some(&self.prefix));
        match listing.next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(RepoError::store(&self.url, &e)),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The store's page-by-page listing, if it has one (S3 and GCS).
    pub fn pages(&self) -> Option<&Arc<dyn PaginatedListStore>> {
        self.pages.as_ref()
    }

    /// The prefix every object of the repository lives under (empty for `file://`).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The repository's URL, as given (for messages).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How the store spells FSx's metadata keys (`_` for `-` on Azure).
    pub fn key_style(&self) -> KeyStyle {
        self.key_style
    }

    /// For `s3://` repositories: the credentials and region the store uses.
    pub fn aws(&self) -> Option<&AwsAccess> {
        self.aws.as_ref()
    }

    /// For `az://` repositories: the account the store uses.
    pub fn azure(&self) -> Option<&AzureAccess> {
        self.azure.as_ref()
    }

    /// The bucket (`s3://`) or container (`az://`) events name, if the store has events.
    pub fn bucket(&self) -> Option<&str> {
        match (&self.aws, &self.azure) {
            (Some(a), _) => Some(&a.bucket),
            (None, Some(a)) => Some(&a.container),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::hsm::RepoPolicy;

    fn spec(url: &str) -> RepoSpec {
        RepoSpec {
            path: "/data".into(),
            url: url.into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            region: Some("us-east-1".into()),
            path_style: true,
            import_policy: RepoPolicy::default(),
            export_policy: RepoPolicy::default(),
            import_metadata: false,
            events: None,
            chunk_size: 1 << 30,
        }
    }

    #[test]
    fn urls_name_stores_and_prefixes() {
        let s = RepoStore::open(&spec("s3://bucket/some/prefix")).unwrap();
        assert_eq!(s.prefix().as_ref(), "some/prefix");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let s = RepoStore::open(&spec(&url)).unwrap();
        assert_eq!(s.prefix().as_ref(), "");
        for bad in ["nope", "ftp://x/y", "s3:///nobucket", "file://host/dir"] {
            assert!(
                matches!(RepoStore::open(&spec(bad)), Err(RepoError::Spec(_))),
                "{bad}"
            );
        }
    }
}
