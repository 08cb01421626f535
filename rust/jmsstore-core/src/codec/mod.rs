//! Body codecs. TEMPORARY STUB (the real module is being written).
#![allow(missing_docs)]
use crate::error::{Error, Result};
use std::borrow::Cow;

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodecId {
    None = 0,
    Gzip = 1,
    Lzf = 2,
    Zstd = 3,
}
impl CodecId {
    pub fn from_byte(b: u8) -> Option<CodecId> {
        match b {
            0 => Some(CodecId::None),
            1 => Some(CodecId::Gzip),
            2 => Some(CodecId::Lzf),
            3 => Some(CodecId::Zstd),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Gzip => "gzip",
            CodecId::Lzf => "lzf",
            CodecId::Zstd => "zstd",
        }
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    None,
    Gzip,
    GzipBest,
    GzipSpeed,
    Lzf,
    Zstd,
}
impl Codec {
    pub fn parse(name: &str) -> Result<Codec> {
        match name {
            "none" => Ok(Codec::None),
            _ => Err(Error::invalid(format!("codec {name}"))),
        }
    }
    pub fn name(self) -> &'static str {
        "none"
    }
    pub fn id(self) -> CodecId {
        CodecId::None
    }
}
pub fn encode_body(_codec: Codec, _threshold: usize, raw: &[u8]) -> (CodecId, Cow<'_, [u8]>) {
    (CodecId::None, Cow::Borrowed(raw))
}
pub fn decode(id: CodecId, stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    if id != CodecId::None || stored.len() != raw_len {
        return Err(Error::Codec("stub".into()));
    }
    Ok(stored.to_vec())
}
