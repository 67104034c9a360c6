//! Questions a tool asks during a call (an upstream's `elicitation/create`), and the answers a
//! person gives: what the job's `input_required` event and snapshot show, what
//! `POST /jobs/{id}/input`, `tasks/update` and the MCP caller send back.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One question of a job, waiting for an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputQuestion {
    /// Names the question within its job (an answer may name it; a task's `inputRequests`
    /// key).
    pub key: String,
    /// What the tool asks, for a person.
    pub message: String,
    /// The JSON Schema of the answer's `content`: an object of primitive properties (MCP
    /// elicitation's restricted schema).
    pub requested_schema: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputAction {
    Accept,
    Decline,
    Cancel,
}

impl InputAction {
    pub fn as_str(self) -> &'static str {
        match self {
            InputAction::Accept => "accept",
            InputAction::Decline => "decline",
            InputAction::Cancel => "cancel",
        }
    }
}

/// An answer: `accept` with `content` matching the schema, or `decline` / `cancel` without.
/// `key` picks the question when a job has several (the oldest when absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputAnswer {
    pub action: InputAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl InputAnswer {
    pub fn decline() -> Self {
        Self {
            action: InputAction::Decline,
            content: None,
            key: None,
        }
    }

    /// Whether the answer fits the question's schema: `accept` needs an object `content` whose
    /// properties have the types, enums, bounds and required names the schema says, and no
    /// others; `decline` and `cancel` carry no content.
    pub fn check(&self, schema: &Value) -> Result<(), InputMismatch> {
        match (self.action, &self.content) {
            (InputAction::Accept, Some(Value::Object(content))) => check_object(schema, content),
            (InputAction::Accept, _) => Err(InputMismatch::new(
                "content",
                "accept needs content: an object with the requested fields",
            )),
            (_, None) => Ok(()),
            (_, Some(_)) => Err(InputMismatch::new(
                "content",
                "only accept carries content; leave it out to decline or cancel",
            )),
        }
    }
}

/// Why an answer does not fit: the field (`content`, or `content.<name>`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InputMismatch {
    pub field: String,
    pub problem: String,
}

impl InputMismatch {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

fn check_object(
    schema: &Value,
    content: &serde_json::Map<String, Value>,
) -> Result<(), InputMismatch> {
    let empty = serde_json::Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if !content.contains_key(name) {
            return Err(InputMismatch::new(format!("content.{name}"), "is required"));
        }
    }
    for (name, value) in content {
        let field = format!("content.{name}");
        let Some(property) = properties.get(name) else {
            return Err(InputMismatch::new(field, "is not a field of the question"));
        };
        check_value(property, value).map_err(|problem| InputMismatch::new(field, problem))?;
    }
    Ok(())
}

/// One primitive value against its property schema.
fn check_value(property: &Value, value: &Value) -> Result<(), String> {
    let kind = property["type"].as_str().unwrap_or("string");
    let fits = match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        _ => true,
    };
    if !fits {
        return Err(format!("must be a {kind}"));
    }
    if let Some(allowed) = property["enum"].as_array()
        && !allowed.contains(value)
    {
        return Err(format!("must be one of {}", Value::Array(allowed.clone())));
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count() as u64;
        if property["minLength"]
            .as_u64()
            .is_some_and(|min| chars < min)
        {
            return Err(format!(
                "must be at least {} characters",
                property["minLength"]
            ));
        }
        if property["maxLength"]
            .as_u64()
            .is_some_and(|max| chars > max)
        {
            return Err(format!(
                "must be at most {} characters",
                property["maxLength"]
            ));
        }
    }
    if let Some(number) = value.as_f64() {
        if property["minimum"].as_f64().is_some_and(|min| number < min) {
            return Err(format!("must be at least {}", property["minimum"]));
        }
        if property["maximum"].as_f64().is_some_and(|max| number > max) {
            return Err(format!("must be at most {}", property["maximum"]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accept(content: Value) -> InputAnswer {
        InputAnswer {
            action: InputAction::Accept,
            content: Some(content),
            key: None,
        }
    }

    #[test]
    fn answers_are_checked_against_the_schema_naming_the_field() {
        let schema = json!({
            "type": "object",
            "properties": {
                "answer": {"type": "string", "maxLength": 5},
                "n": {"type": "integer", "minimum": 1},
                "color": {"type": "string", "enum": ["red", "blue"]}
            },
            "required": ["answer"]
        });
        assert!(
            accept(json!({"answer": "Ada", "n": 2}))
                .check(&schema)
                .is_ok()
        );
        let field = |c: Value| accept(c).check(&schema).unwrap_err().field;
        assert_eq!(field(json!({})), "content.answer");
        assert_eq!(field(json!({"answer": 5})), "content.answer");
        assert_eq!(field(json!({"answer": "too long"})), "content.answer");
        assert_eq!(field(json!({"answer": "a", "n": 0})), "content.n");
        assert_eq!(field(json!({"answer": "a", "n": 1.5})), "content.n");
        assert_eq!(
            field(json!({"answer": "a", "color": "green"})),
            "content.color"
        );
        assert_eq!(field(json!({"answer": "a", "extra": 1})), "content.extra");
        assert_eq!(field(json!("Ada")), "content");
        assert!(InputAnswer::decline().check(&schema).is_ok());
    }
}
