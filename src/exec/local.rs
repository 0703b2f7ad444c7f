//! TEMPORARY stand-in until the local executor branch merges.
use std::path::PathBuf;
use std::time::Instant;

use async_trait::async_trait;

use super::{ExecError, ExecOutput, ExecRequest, Executor};

pub struct LocalConfig {
    pub workdir: PathBuf,
    pub env: Vec<(String, String)>,
}
pub struct LocalExecutor {
    cfg: LocalConfig,
}
impl LocalExecutor {
    pub fn new(cfg: LocalConfig) -> Self {
        LocalExecutor { cfg }
    }
}
#[async_trait]
impl Executor for LocalExecutor {
    fn kind(&self) -> &'static str {
        "local"
    }
    fn workdir(&self) -> String {
        self.cfg.workdir.display().to_string()
    }
    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        let start = Instant::now();
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&req.command)
            .current_dir(&self.cfg.workdir)
            .env_clear()
            .envs(self.cfg.env.iter().cloned())
            .output()
            .await?;
        let mut text = String::from_utf8_lossy(&out.stdout).to_string();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(ExecOutput {
            bytes_seen: text.len() as u64,
            output: text,
            exit_code: out.status.code(),
            timed_out: false,
            cancelled: false,
            oom_killed: false,
            duration_ms: start.elapsed().as_millis() as u64,
        })
    }
    async fn shutdown(&self) -> Result<(), ExecError> {
        Ok(())
    }
}
