//! The admin tools' wording of an operation's errors: ops names the input a refusal concerns
//! by its own field name; the admin tools say it as the `--flag` it came from.

use crate::ops::OpError;

/// An operation's error in the admin tools' terms: the input it concerns as the `--flag` it
/// came from (`--provider-template-id: ...`, `--components[0].type: ...`).
pub fn error_line(e: &OpError) -> String {
    match e {
        OpError::Invalid {
            field: Some(field),
            message,
        }
        | OpError::NotFound {
            field: Some(field),
            message,
        }
        | OpError::Conflict {
            field: Some(field),
            message,
        } => format!("{}: {message}", flag(field)),
        other => other.to_string(),
    }
}

/// The flag of an operation's input field: `--` and the name in kebab case, the path inside
/// it kept (`components[0].type` is `--components[0].type`); inputs joined by `/` stay joined
/// (`params/language` is `--params/--language`). Inputs named after the id they hold take the
/// flag's shorter name (`channel_id` is `--channel`).
fn flag(field: &str) -> String {
    field
        .split('/')
        .map(|one| {
            let end = one.find(['[', '.']).unwrap_or(one.len());
            let (name, path) = one.split_at(end);
            let name = match name {
                "channel_id" => "channel",
                "default_channel_id" => "default_channel",
                other => other,
            };
            format!("--{}{path}", name.replace('_', "-"))
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named_by_their_flags() {
        let line = |e: OpError| error_line(&e);
        assert_eq!(
            line(OpError::invalid_field("name", "the name is empty")),
            "--name: the name is empty"
        );
        assert_eq!(
            line(OpError::conflict_field("provider_template_id", "taken")),
            "--provider-template-id: taken"
        );
        assert_eq!(
            line(OpError::invalid_field("components[0].text", "gaps")),
            "--components[0].text: gaps"
        );
        assert_eq!(
            line(OpError::invalid_field(
                "params/language",
                "template.language: bad"
            )),
            "--params/--language: template.language: bad"
        );
        assert_eq!(
            line(OpError::not_found_field("channel_id", "no channel 9")),
            "--channel: no channel 9"
        );
        assert_eq!(
            line(OpError::invalid_field("default_channel_id", "x")),
            "--default-channel: x"
        );
        assert_eq!(
            line(OpError::not_found("channel 9 does not exist")),
            "channel 9 does not exist"
        );
    }
}
