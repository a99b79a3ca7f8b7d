//! A small SQS client: the calls the event queue needs (`ReceiveMessage`,
//! `DeleteMessageBatch`, `GetQueueAttributes`; `CreateQueue` and `SendMessage` for tests
//! and setup), in
//! SQS's JSON protocol (`POST /`, `X-Amz-Target: AmazonSQS.<Action>`), signed with SigV4
//! by `object_store`'s authorizer with the repository store's own credentials, sent by
//! `object_store`'s HTTP client. No AWS SDK: these calls are all the agent makes.
//!
//! Errors name the queue by its URL and carry SQS's error type and message; never the
//! credentials (the authorizer's headers are not part of any message).

use crate::error::RepoError;
use crate::store::AwsAccess;
use bytes::Bytes;
use object_store::aws::AwsAuthorizer;
use object_store::client::{HttpClient, HttpRequestBody};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use weft_proto::Errno;

/// The longest an answer may be: ten messages of SQS's largest (256 KiB) and their
/// envelopes.
pub const ANSWER_MAX: usize = 4 << 20;
/// The longest a call may take, a long poll of [`WAIT_MAX`] included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(40);
/// The longest wait of a long poll SQS allows.
pub const WAIT_MAX: Duration = Duration::from_secs(20);
/// Most messages one receive answers (SQS's limit).
pub const RECEIVE_MAX: usize = 10;

/// A queue, with the credentials and region to reach it.
#[derive(Debug, Clone)]
pub struct Sqs {
    http: HttpClient,
    /// The queue's URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`).
    queue: String,
    /// Where requests go: the queue URL's scheme, host and port, path `/`.
    endpoint: String,
    access: AwsAccess,
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// What deletes it.
    pub receipt: String,
    /// Its body.
    pub body: String,
}

#[derive(Deserialize)]
struct Received {
    #[serde(rename = "Messages", default)]
    messages: Vec<ReceivedMessage>,
}

#[derive(Deserialize)]
struct ReceivedMessage {
    #[serde(rename = "ReceiptHandle")]
    receipt: String,
    #[serde(rename = "Body", default)]
    body: String,
}

impl Sqs {
    /// A client of the queue at `queue` (its URL), reached with `access`.
    pub fn new(queue: &str, access: &AwsAccess) -> Result<Self, RepoError> {
        let bad = |why: &str| RepoError::Spec(format!("event queue {queue}: {why}"));
        let url = url::Url::parse(queue).map_err(|e| bad(&e.to_string()))?;
        let http = super::queue_client(&url, CALL_TIMEOUT).map_err(|e| bad(&e))?;
        let host = url.host_str().ok_or_else(|| bad("no host"))?;
        let endpoint = match url.port() {
            Some(p) => format!("{}://{host}:{p}/", url.scheme()),
            None => format!("{}://{host}/", url.scheme()),
        };
        Ok(Self {
            http,
            queue: queue.to_string(),
            endpoint,
            access: access.clone(),
        })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.queue
    }

    /// Waits up to `wait` (at most [`WAIT_MAX`]) for up to `max` (at most
    /// [`RECEIVE_MAX`]) messages, hidden from other receivers for `visibility`.
    pub async fn receive(
        &self,
        max: usize,
        wait: Duration,
        visibility: Duration,
    ) -> Result<Vec<Message>, RepoError> {
        let answer = self
            .call(
                "ReceiveMessage",
                json!({
                    "QueueUrl": self.queue,
                    "MaxNumberOfMessages": max.clamp(1, RECEIVE_MAX),
                    "WaitTimeSeconds": wait.min(WAIT_MAX).as_secs(),
                    "VisibilityTimeout": visibility.as_secs().max(1),
                }),
            )
            .await?;
        let r: Received = serde_json::from_value(answer)
            .map_err(|e| self.error(Errno::Io, &format!("a bad ReceiveMessage answer: {e}")))?;
        Ok(r.messages
            .into_iter()
            .map(|m| Message {
                receipt: m.receipt,
                body: m.body,
            })
            .collect())
    }

    /// Deletes received messages (at most [`RECEIVE_MAX`], SQS's batch limit); answers
    /// how many SQS could not delete (they come back after their visibility timeout).
    pub async fn delete(&self, receipts: &[String]) -> Result<usize, RepoError> {
        if receipts.is_empty() {
            return Ok(0);
        }
        let entries: Vec<Value> = receipts
            .iter()
            .take(RECEIVE_MAX)
            .enumerate()
            .map(|(i, r)| json!({ "Id": i.to_string(), "ReceiptHandle": r }))
            .collect();
        let answer = self
            .call(
                "DeleteMessageBatch",
                json!({ "QueueUrl": self.queue, "Entries": entries }),
            )
            .await?;
        Ok(answer
            .get("Failed")
            .and_then(Value::as_array)
            .map_or(0, Vec::len))
    }

    /// Sends a message with `body` (tests, and tools that feed a queue by hand).
    pub async fn send(&self, body: &str) -> Result<(), RepoError> {
        self.call(
            "SendMessage",
            json!({ "QueueUrl": self.queue, "MessageBody": body }),
        )
        .await
        .map(|_| ())
    }

    /// The queue's ARN (what a bucket's notification configuration names): also the
    /// check that the queue exists and these credentials may use it.
    pub async fn arn(&self) -> Result<String, RepoError> {
        let answer = self
            .call(
                "GetQueueAttributes",
                json!({ "QueueUrl": self.queue, "AttributeNames": ["QueueArn"] }),
            )
            .await?;
        answer
            .pointer("/Attributes/QueueArn")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.error(Errno::Io, "GetQueueAttributes answered no QueueArn"))
    }

    /// Creates queue `name` at the SQS service `endpoint` (`http://HOST:PORT`) and answers
    /// its URL (an existing queue of that name answers its URL too).
    pub async fn create_queue(
        endpoint: &str,
        name: &str,
        access: &AwsAccess,
    ) -> Result<String, RepoError> {
        let any = Self::new(&format!("{}/", endpoint.trim_end_matches('/')), access)?;
        let answer = any
            .call("CreateQueue", json!({ "QueueName": name }))
            .await?;
        answer
            .get("QueueUrl")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| any.error(Errno::Io, "CreateQueue answered no QueueUrl"))
    }

    /// One signed call of `action` with `body`; its answer's JSON.
    async fn call(&self, action: &str, body: Value) -> Result<Value, RepoError> {
        let credential = self
            .access
            .credentials
            .get_credential()
            .await
            .map_err(|e| self.error(Errno::Access, &format!("no credentials: {e}")))?;
        let body = Bytes::from(body.to_string());
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri(&self.endpoint)
            .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{action}"))
            .body(HttpRequestBody::from(body))
            .map_err(|e| self.error(Errno::Inval, &e.to_string()))?;
        AwsAuthorizer::new(&credential, "sqs", &self.access.region)
            .try_authorize(&mut request, None)
            .map_err(|e| self.error(Errno::Io, &format!("not signed: {e}")))?;
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|e| self.error(Errno::Io, &format!("{action}: {e}")))?;
        let status = response.status();
        let bytes = super::bounded_body(response, ANSWER_MAX)
            .await
            .map_err(|e| self.error(Errno::Io, &format!("{action}: {e}")))?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                self.error(
                    Errno::Io,
                    &format!("{action}: {status}, not a JSON answer: {e}"),
                )
            })?
        };
        if status.is_success() {
            return Ok(value);
        }
        // `{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "..."}`.
        let kind = value
            .get("__type")
            .and_then(Value::as_str)
            .map(|t| t.rsplit('#').next().unwrap_or(t))
            .unwrap_or("error");
        let message = value
            .get("message")
            .or_else(|| value.get("Message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let errno = match status.as_u16() {
            400 if kind.contains("NonExistent") || kind.contains("DoesNotExist") => Errno::NoEnt,
            401 | 403 => Errno::Access,
            _ if kind.contains("AccessDenied") || kind.contains("Signature") => Errno::Access,
            _ => Errno::Io,
        };
        Err(self.error(errno, &format!("{action}: {status} {kind}: {message}")))
    }

    fn error(&self, errno: Errno, message: &str) -> RepoError {
        RepoError::Store {
            url: self.queue.clone(),
            message: message.to_string(),
            errno,
        }
    }
}
