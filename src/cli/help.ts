// The command lines' own help texts, in one place: each CLI prints its own,
// and docs/reference/cli.md is generated from them (src/tools/reference.ts).
import { FAILURE_CLASSES } from '../../worker/envelope.js';

export const JOBFLEET_USAGE = `usage: jobfleet <command> [options]

commands:
  verify   check the claim store's invariants (exits 1 on any violation)
  dlq      list, show, replay or discard dead letters (audited, rate-limited)

run "jobfleet <command> --help" for a command's options`;

export const DLQ_HELP = `usage: jobfleet dlq <list|show|replay|discard> [options]

connection (defaults from the worker's environment):
  --claims-url URL          PostgreSQL claims database ($JOBFLEET_CLAIMS_URL)
  --amqp-url URL            RabbitMQ ($JOBFLEET_BROKER_URL); replay and discard only
  --queue NAME              the work queue the dead letters came from ($JOBFLEET_QUEUE)
  --dead-letter-queue NAME  ($JOBFLEET_DEAD_LETTER_QUEUE, default "<queue>.dlq")
  --schema NAME             schema of the jobfleet_* tables

selection (list, replay, discard):
  --id N, --key K           repeatable
  --reason-contains TEXT    a substring of the dead-letter reason
  --class NAME              failure class: ${FAILURE_CLASSES.join(', ')}
  --since ISO, --until ISO  dead-lettered in this time range
  --status S                list only: quarantined (default), replayed, discarded, superseded,
                            marked_done

  list     [--limit 50] [--json]
  show ID  [--json]                     the row, its audit trail, and its payload when stored
  replay   --reason WHY [--initiator WHO] [--rate 5] [--burst 10] [--max-count 100]
           [--failure-threshold 5] [--edit-payload FILE] [--wait] [--wait-timeout 300]
           [--hold-timeout 900] [--force]
  discard  --reason WHY [--initiator WHO] [--max-count 100] [--mark-done]

A replay keeps each job's idempotency key, resets its attempts, and skips keys that completed
meanwhile. It stops when --failure-threshold replayed jobs fail again. --edit-payload replaces the
payload of the one selected dead letter (select it with --id) and needs --reason.

A held in_doubt dead letter (docs/in-doubt.md) waits for a person's decision, recorded in the
audit with who decided: replay it when its effect did not happen (the handler runs again), or
discard it with --mark-done when it did (its key completes without a run; a later copy of the
job is acked as a duplicate). --mark-done refuses any other failure class.

A replay waits while the incident lasts: while dead letters of the selected class still arrive
(the last 2 minutes) and, through \`kubectl jobworker dlq\`, while the JobWorker's oldest message
is past its objective, its dependency throttles, or it rolls out or back. It goes on by itself
when that ends, and gives up after --hold-timeout seconds held (exit 3; through \`kubectl jobworker
dlq\`, the JobReplay stays and replays once the hold ends). --force replays anyway;
the audit records that it was forced. Through \`kubectl jobworker dlq\`, --rate is also capped at
what the JobWorker's downstream budget lets its fleet complete (it says so when it caps).

The audit records who replayed or discarded: through \`kubectl jobworker dlq\`, the user the
apiserver authenticated (its SelfSubjectReview; with --as, the user impersonated), and a typed
--initiator only beside the reason. \`jobfleet dlq\` itself has no apiserver to ask: it records
--initiator, or the local login.`;

export const VERIFY_HELP = `usage: jobfleet verify [options]

  --claims-url URL          PostgreSQL URL of the claims database (default $JOBFLEET_CLAIMS_URL)
  --schema NAME             schema holding the jobfleet_* tables (default: the URL's search_path)
  --max-attempts N          the workers' attempt ceiling (default $JOBFLEET_MAX_ATTEMPTS or 5)
  --management-url URL      RabbitMQ management API, e.g. http://user:pass@host:15672;
                            also checks that each quarantined entry's message is still in its DLQ
  --vhost NAME              RabbitMQ vhost of the queues (default /)
  --dead-letter-queue NAME  the DLQ (default "<queue>.dlq" for each origin queue)
  --settle-seconds N        the management API's counts are sampled (every 5 s by default):
                            a shortfall is reported only when it is still there this much
                            later (default 6)
  --effects-table NAME      your record of business effects, in the same database (a table
                            written in the job's transaction, or the downstream's idempotency
                            records loaded there): checks one row per completed key
  --effects-key COLUMN      its idempotency-key column (default key)
  --effects-time-column COL its timestamp: rows older than the oldest kept claim are skipped
  --json                    print the results as JSON

exit status: 0 every invariant holds, 1 a violation, 2 the check could not run`;

export const KUBECTL_JOBWORKER_USAGE = `usage: kubectl jobworker <command> NAME [-n NAMESPACE] [options]

commands:
  status NAME [--watch] [--timeout 10m]   phase, revisions, replicas, queue age, the analysis and its
                                          time left, and whether an operator still updates it;
                                          --watch waits for the analysis too; exits 0 healthy,
                                          1 blocked, degraded, paused or no operator running,
                                          3 still progressing
  history NAME                            revisions: image, key rule, schema versions
  undo NAME [--to-revision N]             roll back (to the previous revision by default): the
                                          operator drains the current revision first
  why NAME                                what blocks or degrades it, and how to fix it; first,
                                          an operator that no longer renews its lease
  pause NAME --reason TEXT                stop the fleet: consumers drain, then 0 replicas are held
                                          (scaling and rollouts hold); who and why go in an event
  resume NAME --reason TEXT               replicas follow the scaler again
  promote NAME --reason TEXT              a Cohort rollout: skip the current step's analysis and go on
  abort NAME --reason TEXT                a Cohort rollout: stop it; the cohort drains first, the stable
                                          revision keeps the fleet (who and why go in status and events)
  dlq list|show|replay|discard NAME [ID]  its dead letters (options as for "jobfleet dlq"): list
                                          and replay ask the operator through the apiserver (a
                                          JobReplay; no Secret read, no route to the database
                                          or broker needed); show, discard, list --status
                                          and replay --edit-payload read the Secrets

  version                                 this plugin's version

status and why read the operator's leader-election Lease: the one the JobWorker's status names
(status.operatorLease), else jobfleet-system/jobfleet-operator; --operator-namespace NAMESPACE
looks in that namespace instead. Not renewed for its duration (at least 15 s), or missing: no
operator updates the status, and they say so. Reading it needs get on leases there; without
it they say that it could not be checked.

Reads the cluster with your kubeconfig (KUBECONFIG, or ~/.kube/config), as kubectl does:
-n/--namespace, --kubeconfig FILE, --context NAME, --as USER and --as-group GROUP work as kubectl's.
undo, pause, resume, promote, abort and a dead-letter replay or discard record the user the
apiserver authenticated (SelfSubjectReview, Kubernetes 1.28 or later), never a typed name.`;
