"""`horizon batch`: run the agent over many repositories unattended, one sandbox per job."""

from agent.batch.jobs import BatchJob, JobLimits, JobLineError, load_jobs
from agent.batch.results import JobResult, JobStatus

__all__ = ["BatchJob", "JobLimits", "JobLineError", "JobResult", "JobStatus", "load_jobs"]
