//! Chat templates: the model's Jinja template rendered with minijinja, configured like
//! Hugging Face's `apply_chat_template` (trim_blocks, lstrip_blocks, loop controls,
//! Python string methods, `raise_exception`, `strftime_now`, `tojson`).

use minijinja::{context, Environment, Error, ErrorKind, Value};

use crate::error::{Result, TokenizerError};

/// One chat turn.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, …
    pub role: String,
    /// The turn's text.
    pub content: String,
    /// An assistant turn's tool calls, as templates expect them (HF: `[{"type":
    /// "function", "function": {"name": …, "arguments": {…}}}]`, arguments an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A `tool` turn: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function's name (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }
}

const TEMPLATE_NAME: &str = "chat";

/// llama.cpp's built-in "gemma" chat format (`llm_chat_apply_template`), for Gemma
/// files without `tokenizer.chat_template`: system messages are joined into the first
/// following user turn, `assistant` is called `model`, contents are trimmed. BOS is not
/// part of the text: [`crate::Tokenizer::encode`] adds it (`add_bos_token`).
pub(crate) const GEMMA_TEMPLATE: &str = "\
{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{%- set ns.system = ns.system + m.content.strip() -%}
{%- else -%}
{%- set role = 'model' if m.role == 'assistant' else m.role -%}
{{- '<start_of_turn>' + role + '\\n' -}}
{%- if ns.system and role != 'model' -%}
{{- ns.system + '\\n\\n' -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- m.content.strip() + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\\n' -}}
{%- endif -%}";

/// A compiled chat template plus the token texts it may refer to.
pub(crate) struct ChatTemplate {
    source: String,
    /// The compiled template, or why it failed to compile. A broken template must not
    /// stop the model from loading: only chat requests fail, with this message.
    env: Result<Environment<'static>>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub(crate) fn new(source: &str, bos_token: String, eos_token: String) -> Self {
        let mut env = Environment::new();
        // HF renders with trim_blocks and lstrip_blocks, and keeps jinja2's default of
        // dropping a single trailing newline.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let env = env
            .add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map(|()| env)
            .map_err(|e| TokenizerError::Template(describe(&e)));
        ChatTemplate {
            source: source.to_owned(),
            env,
            bos_token,
            eos_token,
        }
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Whether the source compiled; the message says why not.
    pub(crate) fn compiled(&self) -> Result<()> {
        self.env().map(|_| ())
    }

    /// The compiled template, or (a copy of) why it failed to compile.
    fn env(&self) -> Result<&Environment<'static>> {
        match &self.env {
            Ok(env) => Ok(env),
            Err(TokenizerError::Template(m)) => Err(TokenizerError::Template(m.clone())),
            Err(e) => Err(TokenizerError::Template(e.to_string())),
        }
    }

    pub(crate) fn bos_eos(&self) -> (String, String) {
        (self.bos_token.clone(), self.eos_token.clone())
    }

    /// Renders `messages`; `extra` (an object, or `()`) adds variables to the context
    /// (`chat_template_kwargs`), without overriding the four standard ones.
    pub(crate) fn render(
        &self,
        messages: &[crate::ChatMessage],
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<String> {
        let env = self.env()?;
        let tmpl = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TokenizerError::Template(describe(&e)))?;
        tmpl.render(context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            ..extra
        })
        .map_err(|e| TokenizerError::Template(describe(&e)))
    }
}

/// The error with its chain of causes (minijinja puts the useful part in the source).
fn describe(e: &Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// `raise_exception(msg)`: templates use it to reject conversations they cannot format.
fn raise_exception(msg: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(fmt)`: the current UTC date/time, for templates that print today's date.
/// Supports `%Y %y %m %d %e %B %b %A %a %H %M %S %j %%`; other directives are kept as is.
fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    crate::date::format_utc(secs, &fmt)
}
