//! tonic 0.14 as a gRPC user without a build script writes it: prost messages derived
//! by hand, the service written against `tonic::server::Grpc` (what tonic-build would
//! generate), the client against `tonic::client::Grpc`.

use std::convert::Infallible;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::PathAndQuery;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, StdError};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use volley_rpc_bench as service;

/// An 8-byte value, there and back.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// A payload up.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Payload {
    #[prost(bytes = "bytes", tag = "1")]
    pub body: Bytes,
}

/// Put's answer: the length and xxh3 of what came.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Digest {
    #[prost(uint64, tag = "1")]
    pub len: u64,
    #[prost(uint64, tag = "2")]
    pub hash: u64,
}

/// Get's question: which slice of the pattern.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Slice {
    #[prost(uint64, tag = "1")]
    pub index: u64,
    #[prost(uint64, tag = "2")]
    pub len: u64,
}

/// The bench service: echo, put, get.
#[derive(Clone)]
pub struct BenchService {
    pub pattern: Bytes,
}

impl tonic::server::NamedService for BenchService {
    const NAME: &'static str = "bench.Bench";
}

macro_rules! unary {
    ($req:expr, $decode:ty, $encode:ty, $handler:expr) => {{
        struct Svc<F>(F);
        impl<F: Fn($decode) -> $encode> tonic::server::UnaryService<$decode> for Svc<F> {
            type Response = $encode;
            type Future = BoxFuture<Response<$encode>, Status>;
            fn call(&mut self, request: Request<$decode>) -> Self::Future {
                let reply = (self.0)(request.into_inner());
                Box::pin(async move { Ok(Response::new(reply)) })
            }
        }
        let req = $req;
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<$encode, $decode>::default());
            Ok(grpc.unary(Svc($handler), req).await)
        })
    }};
}

impl<B> Service<http::Request<B>> for BenchService
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match req.uri().path() {
            "/bench.Bench/Echo" => unary!(req, Value, Value, |v: Value| v),
            "/bench.Bench/Put" => unary!(req, Payload, Digest, |p: Payload| Digest {
                len: p.body.len() as u64,
                hash: xxhash_rust::xxh3::xxh3_64(&p.body),
            }),
            "/bench.Bench/Get" => {
                let pattern = self.pattern.clone();
                unary!(req, Slice, Payload, move |s: Slice| {
                    let start = service::offset(s.index);
                    Payload {
                        body: pattern.slice(start..start + s.len as usize),
                    }
                })
            }
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

/// A client's calls.
#[derive(Clone)]
pub struct BenchGrpc {
    grpc: tonic::client::Grpc<Channel>,
}

impl BenchGrpc {
    pub fn new(channel: Channel) -> Self {
        Self {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn unary<M1, M2>(&mut self, path: &'static str, message: M1) -> Result<M2, String>
    where
        M1: prost::Message + Send + Sync + 'static,
        M2: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc.ready().await.map_err(|e| e.to_string())?;
        let reply = self
            .grpc
            .unary(
                Request::new(message),
                PathAndQuery::from_static(path),
                ProstCodec::<M1, M2>::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(reply.into_inner())
    }

    pub async fn echo(&mut self, value: u64) -> Result<u64, String> {
        let reply: Value = self.unary("/bench.Bench/Echo", Value { value }).await?;
        Ok(reply.value)
    }

    pub async fn put(&mut self, body: Bytes) -> Result<(u64, u64), String> {
        let reply: Digest = self.unary("/bench.Bench/Put", Payload { body }).await?;
        Ok((reply.len, reply.hash))
    }

    pub async fn get(&mut self, index: u64, len: u64) -> Result<Bytes, String> {
        let reply: Payload = self.unary("/bench.Bench/Get", Slice { index, len }).await?;
        Ok(reply.body)
    }
}
