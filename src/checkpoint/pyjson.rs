//! Pickled configuration objects (`argparse.Namespace`, omegaconf `DictConfig`/`ListConfig`
//! and their value nodes, plain dicts) turned into JSON, with a depth cap (omegaconf nodes
//! point back at their parents, so the tree can be cyclic).

use serde_json::{Map, Number, Value as Json};

use super::pickle::{Node, Pickle, Value};

pub const MAX_DEPTH: usize = 100;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PyJsonError {
    #[error("config nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Converts a pickled config value to JSON. Objects outside the config vocabulary become
/// `{"__class__": "module.Name"}` so they are visible but inert.
pub fn to_json(p: &Pickle, v: &Value) -> Result<Json, PyJsonError> {
    convert(p, v, 0)
}

fn convert(p: &Pickle, v: &Value, depth: usize) -> Result<Json, PyJsonError> {
    if depth > MAX_DEPTH {
        return Err(PyJsonError::TooDeep);
    }
    Ok(match v {
        Value::None => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::Number((*i).into()),
        Value::BigInt(_) => Json::String("<big int>".into()),
        Value::Float(f) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Str(s) => Json::String(s.to_string()),
        Value::Bytes(_) => Json::String("<bytes>".into()),
        Value::Global(g) => Json::String(g.to_string()),
        Value::Node(_) => match p.node(v) {
            None => Json::Null,
            Some(Node::List(items)) | Some(Node::Tuple(items)) | Some(Node::Set(items)) => {
                Json::Array(items.iter().map(|x| convert(p, x, depth + 1)).collect::<Result<_, _>>()?)
            }
            Some(Node::Dict(d)) => dict_json(p, d, depth)?,
            Some(Node::Storage(_)) | Some(Node::Tensor(_)) => Json::String("<tensor>".into()),
            Some(Node::Object { class, args, state, .. }) => object(p, class, args, state.as_ref(), depth)?,
        },
    })
}

fn state_dict<'a>(p: &'a Pickle, state: Option<&Value>) -> Option<&'a super::pickle::Dict> {
    let s = state?;
    if let Some(d) = p.dict(s) {
        return Some(d);
    }
    // `(state, slotstate)` tuples from `__reduce_ex__` of classes with __slots__.
    match p.node(s)? {
        Node::Tuple(items) => items.iter().find_map(|x| p.dict(x)),
        _ => None,
    }
}

fn object(p: &Pickle, class: &str, args: &[Value], state: Option<&Value>, depth: usize) -> Result<Json, PyJsonError> {
    let sd = state_dict(p, state);
    match class {
        "argparse.Namespace" => match sd {
            Some(d) => dict_json(p, d, depth + 1),
            None => Ok(Json::Object(Map::new())),
        },
        "omegaconf.dictconfig.DictConfig" | "omegaconf.listconfig.ListConfig" => match sd.and_then(|d| d.get("_content")) {
            Some(content) => convert(p, content, depth + 1),
            None => Ok(Json::Null),
        },
        c if c.starts_with("omegaconf.nodes.") => match sd.and_then(|d| d.get("_val")) {
            Some(val) => convert(p, val, depth + 1),
            None => Ok(Json::Null),
        },
        _ => {
            // Enum members pickle as `REDUCE(EnumClass, (value,))`: the value is what fairseq
            // compares against (`enum_to_str`).
            if let (Some(first), None) = (args.first(), sd) {
                if matches!(first, Value::Str(_) | Value::Int(_)) && args.len() == 1 {
                    return convert(p, first, depth + 1);
                }
            }
            let mut m = Map::new();
            m.insert("__class__".into(), Json::String(class.to_string()));
            Ok(Json::Object(m))
        }
    }
}

fn dict_json(p: &Pickle, d: &super::pickle::Dict, depth: usize) -> Result<Json, PyJsonError> {
    let mut m = Map::new();
    for (k, val) in &d.entries {
        let key = match k {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            other => format!("<{}>", p.type_name(other)),
        };
        m.insert(key, convert(p, val, depth + 1)?);
    }
    Ok(Json::Object(m))
}
