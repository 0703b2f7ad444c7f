//! The default system prompt.

use crate::config::ToolKind;
use crate::exec::shell::ShellMode;
use crate::tools::edit::EDIT_TOOL_NAME;

/// The system prompt used unless `--system` or `--system-file` is given,
/// with the `bash` tool alone.
pub fn default_system_prompt(workdir: &str, shell: ShellMode) -> String {
    system_prompt(workdir, &[ToolKind::Bash], shell)
}

/// The default system prompt for the tools offered (`--tools`); it states
/// what `shell` carries between calls.
pub fn system_prompt(workdir: &str, tools: &[ToolKind], shell: ShellMode) -> String {
    let bash = tools.contains(&ToolKind::Bash);
    let edit = tools.contains(&ToolKind::Edit);
    let mut s = format!(
        "You are an autonomous software engineer working in a sandboxed Linux machine.\n\
         Your working directory is {workdir}; put your work there.\n\
         \n"
    );
    s.push_str(match (bash, edit) {
        (true, true) => "You have two tools, `bash` and `str_replace_based_edit_tool`.\n\n`bash`: ",
        (false, true) => "You have one tool, `str_replace_based_edit_tool`.\n",
        _ => "You have one tool, `bash`. ",
    });
    if bash {
        s.push_str(&format!(
            "It runs a command with bash. {} \
             stdout and stderr come back together; long output is cut in the middle, so filter it \
             (head, tail, grep) rather than printing whole files. Commands are killed at their \
             timeout; nothing is interactive, so never start editors, pagers or prompts. \
             The network may be off.\n",
            shell.semantics(workdir)
        ));
    }
    if edit {
        s.push_str(&format!(
            "{}`{EDIT_TOOL_NAME}` views a file with line numbers (or lists a directory), creates \
             a new file, replaces a string that occurs exactly once, or inserts lines after a given \
             line; relative paths start in {workdir}; it handles UTF-8 text files up to 1 MiB.{}\n",
            if bash { "\n" } else { "" },
            if bash {
                " Prefer it to sed, heredocs or echo for reading and changing files."
            } else {
                ""
            }
        ));
    }
    s.push_str(if bash {
        "\nAct, don't narrate: inspect, change, and verify with commands. When the task is done \
         and checked, answer with a short summary and no tool call."
    } else {
        "\nAct, don't narrate: inspect and change the files. When the task is done and checked, \
         answer with a short summary and no tool call."
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_the_tools_offered() {
        let bash = system_prompt("/w", &[ToolKind::Bash], ShellMode::Fresh);
        assert!(bash.contains("You have one tool, `bash`. It runs a command with bash."));
        assert!(!bash.contains(EDIT_TOOL_NAME));
        let both = system_prompt("/w", &[ToolKind::Bash, ToolKind::Edit], ShellMode::Fresh);
        assert!(both.contains("two tools") && both.contains("fresh shell"));
        let kept = system_prompt("/w", &[ToolKind::Bash], ShellMode::Persistent);
        assert!(kept.contains("The shell persists between calls"));
        assert!(both.contains("replaces a string that occurs exactly once"));
        let edit = system_prompt("/w", &[ToolKind::Edit], ShellMode::Fresh);
        assert!(edit.contains("You have one tool, `str_replace_based_edit_tool`."));
        assert!(!edit.contains("bash -c") && !edit.contains("verify with commands"));
    }
}
