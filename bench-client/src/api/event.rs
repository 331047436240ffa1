//! Typed, lenient decoding of one event's JSON: only the fields the dialects read, strings borrowed
//! from the event where possible, arrays counted without being collected.
//!
//! Every value still goes through `serde_json`'s `deserialize_any`, so syntax errors, number range and
//! nesting depth fail exactly as when the event is parsed into a `serde_json::Value`. A field of an
//! unexpected type reads as absent (as `Value::as_str` and friends do), a repeated key keeps its last
//! value (as `Value`'s map does), and an event that is not an object has no fields at all.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::Usage;

/// How a JSON value of each type reads as `Self`; types a shape does not take read as
/// [`Shape::other`], after their contents are parsed and dropped.
trait Shape<'de>: Sized {
    /// A value of a type this shape does not take.
    fn other() -> Self;
    /// `null`.
    fn null() -> Self {
        Self::other()
    }
    /// A string.
    fn string(_s: Cow<'de, str>) -> Self {
        Self::other()
    }
    /// A non-negative integer.
    fn unsigned(_n: u64) -> Self {
        Self::other()
    }
    /// A number with a fraction or an exponent.
    fn float(_x: f64) -> Self {
        Self::other()
    }
    /// An object.
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Self::other())
    }
    /// An array.
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Self::other())
    }
}

/// Deserializes any JSON value as the shape `T`.
struct AsShape<T>(T);

struct ShapeVisitor<T>(PhantomData<T>);

impl<'de, T: Shape<'de>> Visitor<'de> for ShapeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _v: bool) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        Ok(match u64::try_from(v) {
            Ok(n) => T::unsigned(n),
            Err(_) => T::other(),
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        Ok(T::unsigned(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<T, E> {
        Ok(T::float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<T, E> {
        Ok(T::string(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok(T::string(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<T, E> {
        Ok(T::string(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

impl<'de, T: Shape<'de>> Deserialize<'de> for AsShape<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor(PhantomData)).map(AsShape)
    }
}

/// Any value, parsed and dropped.
struct Skip;

impl Shape<'_> for Skip {
    fn other() -> Self {
        Skip
    }
}

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor(PhantomData))
    }
}

/// A string field (`Value::as_str`).
#[derive(Default)]
struct Str<'de>(Option<Cow<'de, str>>);

impl<'de> Shape<'de> for Str<'de> {
    fn other() -> Self {
        Self(None)
    }
    fn string(s: Cow<'de, str>) -> Self {
        Self(Some(s))
    }
}

/// A count field (`Value::as_u64`, saturated to `u32`).
#[derive(Default)]
struct U32(Option<u32>);

impl Shape<'_> for U32 {
    fn other() -> Self {
        Self(None)
    }
    fn unsigned(n: u64) -> Self {
        Self(Some(u32::try_from(n).unwrap_or(u32::MAX)))
    }
}

/// A seconds field (`Value::as_f64`: any number).
#[derive(Default)]
struct Seconds(Option<f64>);

impl Shape<'_> for Seconds {
    fn other() -> Self {
        Self(None)
    }
    fn unsigned(n: u64) -> Self {
        Self(Some(n as f64))
    }
    fn float(x: f64) -> Self {
        Self(Some(x).filter(|x| x.is_finite()))
    }
}

/// The length of an array field (`Value::as_array().len()`), counted without collecting.
#[derive(Default)]
struct Count(Option<usize>);

impl<'de> Shape<'de> for Count {
    fn other() -> Self {
        Self(None)
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut n = 0usize;
        while seq.next_element::<Skip>()?.is_some() {
            n += 1;
        }
        Ok(Self(Some(n)))
    }
}

/// An array field collected element by element.
struct Values(Option<Vec<Value>>);

impl<'de> Shape<'de> for Values {
    fn other() -> Self {
        Self(None)
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(e) = seq.next_element::<Value>()? {
            v.push(e);
        }
        Ok(Self(Some(v)))
    }
}

/// Iterate an object's keys, handing each to `field`, which must consume the value.
fn each_key<'de, A: MapAccess<'de>>(
    mut map: A,
    mut field: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    while let Some(AsShape(Str(key))) = map.next_key::<AsShape<Str<'de>>>()? {
        match key {
            Some(k) => field(k.as_ref(), &mut map)?,
            None => {
                map.next_value::<Skip>()?;
            }
        }
    }
    Ok(())
}

fn value<'de, T: Shape<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value::<AsShape<T>>().map(|l| l.0)
}

/// SGLang's `finish_reason`: a string, or an object with a string `type`.
#[derive(Default)]
struct FinishReason(Option<String>);

impl<'de> Shape<'de> for FinishReason {
    fn other() -> Self {
        Self(None)
    }
    fn string(s: Cow<'de, str>) -> Self {
        Self(Some(s.into_owned()))
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut ty = None;
        each_key(map, |k, m| {
            match k {
                "type" => ty = value::<Str, _>(m)?.0.map(Cow::into_owned),
                _ => {
                    m.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(Self(ty))
    }
}

/// SGLang's `meta_info` (present with any value, `null` included).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Meta {
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    pub cached_tokens: Option<u32>,
    pub finish_reason: Option<String>,
    /// `--enable-metrics`: seconds the request waited in the scheduler's queue.
    pub queue_time: Option<f64>,
    /// `--enable-metrics`, last event: seconds from the request's arrival to its first token.
    pub first_token_latency: Option<f64>,
}

impl<'de> Shape<'de> for Meta {
    fn other() -> Self {
        Self::default()
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut m = Self::default();
        each_key(map, |k, a| {
            match k {
                "prompt_tokens" => m.prompt_tokens = value::<U32, _>(a)?.0,
                "completion_tokens" => m.completion_tokens = value::<U32, _>(a)?.0,
                "cached_tokens" => m.cached_tokens = value::<U32, _>(a)?.0,
                "finish_reason" => m.finish_reason = value::<FinishReason, _>(a)?.0,
                "queue_time" => m.queue_time = value::<Seconds, _>(a)?.0,
                "first_token_latency" => m.first_token_latency = value::<Seconds, _>(a)?.0,
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(m)
    }
}

/// The OpenAI `usage` object: `None` when `null`, all counts absent when not an object.
struct UsageField(Option<Usage>);

impl<'de> Shape<'de> for UsageField {
    fn other() -> Self {
        Self(Some(Usage::default()))
    }
    fn null() -> Self {
        Self(None)
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut u = Usage::default();
        let mut flat_cached = None;
        let mut detail_cached = None;
        each_key(map, |k, a| {
            match k {
                "prompt_tokens" => u.prompt_tokens = value::<U32, _>(a)?.0,
                "completion_tokens" => u.completion_tokens = value::<U32, _>(a)?.0,
                "cached_tokens" => flat_cached = value::<U32, _>(a)?.0,
                "prompt_tokens_details" => detail_cached = value::<Details, _>(a)?.0,
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        u.cached_tokens = detail_cached.or(flat_cached);
        Ok(Self(Some(u)))
    }
}

/// `usage.prompt_tokens_details.cached_tokens`.
struct Details(Option<u32>);

impl<'de> Shape<'de> for Details {
    fn other() -> Self {
        Self(None)
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut c = None;
        each_key(map, |k, a| {
            match k {
                "cached_tokens" => c = value::<U32, _>(a)?.0,
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(Self(c))
    }
}

/// A chat `delta`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta {
    /// Byte length of `content`, when it is a string.
    pub content: Option<usize>,
    /// Byte length of `reasoning_content`, when it is a string.
    pub reasoning_content: Option<usize>,
    /// A `role` key is present (any value).
    pub has_role: bool,
}

impl<'de> Shape<'de> for Delta {
    fn other() -> Self {
        Self::default()
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut d = Self::default();
        each_key(map, |k, a| {
            match k {
                "content" => d.content = value::<Str, _>(a)?.0.map(|s| s.len()),
                "reasoning_content" => d.reasoning_content = value::<Str, _>(a)?.0.map(|s| s.len()),
                "role" => {
                    a.next_value::<Skip>()?;
                    d.has_role = true;
                }
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(d)
    }
}

/// The first element of `choices` (any value; one that is not an object has no fields).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Choice {
    /// Byte length of `text`, when it is a string.
    pub text: Option<usize>,
    /// `delta` (all absent when missing or not an object).
    pub delta: Delta,
    /// `finish_reason`, when it is a string.
    pub finish_reason: Option<String>,
    /// Length of `token_ids`, when it is an array.
    pub token_ids: Option<usize>,
}

impl<'de> Shape<'de> for Choice {
    fn other() -> Self {
        Self::default()
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut c = Self::default();
        each_key(map, |k, a| {
            match k {
                "text" => c.text = value::<Str, _>(a)?.0.map(|s| s.len()),
                "delta" => c.delta = value::<Delta, _>(a)?,
                "finish_reason" => c.finish_reason = value::<Str, _>(a)?.0.map(Cow::into_owned),
                "token_ids" => c.token_ids = value::<Count, _>(a)?.0,
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(c)
    }
}

/// `choices`: the first element when it is a non-empty array.
struct FirstChoice(Option<Choice>);

impl<'de> Shape<'de> for FirstChoice {
    fn other() -> Self {
        Self(None)
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let first = seq.next_element::<AsShape<Choice>>()?.map(|l| l.0);
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Self(first))
    }
}

/// SGLang's `output_ids`: counted, or collected while the decoder still compares lists.
#[derive(Debug, PartialEq)]
pub(crate) enum OutputIds {
    /// Only the length was kept.
    Count(usize),
    /// The elements.
    Values(Vec<Value>),
}

impl OutputIds {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            Self::Count(n) => *n,
            Self::Values(v) => v.len(),
        }
    }
}

/// The fields of one event that any dialect reads.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Event<'a> {
    /// `error`, with any value (`null` included).
    pub error: Option<Value>,
    /// `object`, when a string.
    pub object: Option<Cow<'a, str>>,
    /// `message`, when a string.
    pub message: Option<Cow<'a, str>>,
    /// SGLang `text`, when a string.
    pub text: Option<Cow<'a, str>>,
    /// SGLang `output_ids`, when an array.
    pub output_ids: Option<OutputIds>,
    /// SGLang `meta_info`, present with any value.
    pub meta_info: Option<Meta>,
    /// OpenAI `choices[0]`.
    pub choice: Option<Choice>,
    /// OpenAI `usage` (`None` when missing or `null`).
    pub usage: Option<Usage>,
    /// llama.cpp `timings.prompt_ms`: the server's own prefill time of the request, in ms.
    pub timings_prompt_ms: Option<f64>,
}

/// Parses one event; `collect_ids` keeps the elements of `output_ids` rather than their count.
pub(crate) struct EventSeed {
    pub collect_ids: bool,
}

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = Event<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Event<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed {
    type Value = Event<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _v: bool) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_i64<E>(self, _v: i64) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_u64<E>(self, _v: u64) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_f64<E>(self, _v: f64) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_str<E>(self, _v: &str) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_unit<E>(self) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_none<E>(self) -> Result<Event<'de>, E> {
        Ok(Event::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Event<'de>, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Event::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Event<'de>, A::Error> {
        let mut ev = Event::default();
        each_key(map, |k, a| {
            match k {
                "error" => ev.error = Some(a.next_value::<Value>()?),
                "object" => ev.object = value::<Str, _>(a)?.0,
                "message" => ev.message = value::<Str, _>(a)?.0,
                "text" => ev.text = value::<Str, _>(a)?.0,
                "output_ids" => {
                    ev.output_ids = if self.collect_ids {
                        value::<Values, _>(a)?.0.map(OutputIds::Values)
                    } else {
                        value::<Count, _>(a)?.0.map(OutputIds::Count)
                    }
                }
                "meta_info" => ev.meta_info = Some(value::<Meta, _>(a)?),
                "choices" => ev.choice = value::<FirstChoice, _>(a)?.0,
                "usage" => ev.usage = value::<UsageField, _>(a)?.0,
                // Only llama.cpp's last event has it: a `Value` costs nothing on the hot path.
                "timings" => {
                    ev.timings_prompt_ms = a
                        .next_value::<Value>()?
                        .get("prompt_ms")
                        .and_then(Value::as_f64)
                        .filter(|ms| ms.is_finite() && *ms >= 0.0)
                }
                _ => {
                    a.next_value::<Skip>()?;
                }
            }
            Ok(())
        })?;
        Ok(ev)
    }
}

/// Parse one event's data (the whole text must be one JSON value).
pub(crate) fn parse(data: &str, collect_ids: bool) -> serde_json::Result<Event<'_>> {
    let mut de = serde_json::Deserializer::from_str(data);
    let ev = EventSeed { collect_ids }.deserialize(&mut de)?;
    de.end()?;
    Ok(ev)
}
