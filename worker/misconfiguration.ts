// Failures at start-up that no retry can fix: the configuration is wrong.
// A worker that meets one exits non-zero with the cause (the pod's restarts
// and last termination message then say it), instead of retrying forever as
// if the broker or the database were down.

const sqlstate = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
};

/** What is wrong and what to fix, or undefined when a retry may succeed. */
export function brokerMisconfiguration(err: unknown): string | undefined {
  const message = String((err as { message?: unknown } | undefined)?.message ?? err);
  // Only the connection handshake: a 403 on a later declare is a permission
  // on one queue, and a vhost that is down answers NOT_ALLOWED too.
  if (/Handshake terminated by server: 403/.test(message))
    return 'RabbitMQ refused the user or password in JOBFLEET_BROKER_URL (ACCESS_REFUSED): fix them in the Secret it comes from';
  if (/NOT[-_]ALLOWED.*vhost .* not found/.test(message))
    return 'the vhost in JOBFLEET_BROKER_URL does not exist (NOT_ALLOWED): create it, or fix the URL';
  return undefined;
}

export function claimStoreMisconfiguration(err: unknown): string | undefined {
  switch (sqlstate(err)) {
    case '28P01':
    case '28000':
      return 'PostgreSQL refused the user or password in JOBFLEET_CLAIMS_URL: fix them in the Secret it comes from';
    case '3D000':
      return 'the database JOBFLEET_CLAIMS_URL names does not exist: create it, or fix the URL';
    case '3F000':
      return "the schema in JOBFLEET_CLAIMS_URL's search_path does not exist: create it, or fix the URL's options";
    case '42501':
      return "the user in JOBFLEET_CLAIMS_URL may not create the claim store's tables: grant it CREATE on the schema";
    default:
      return undefined;
  }
}
