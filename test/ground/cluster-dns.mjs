// The test ground's stand-in for cluster DNS, as the local runner stands in
// for the kubelet: loaded into a process with `--import`, it resolves the
// names JOBFLEET_GROUND_HOSTS lists (name=address,…) and leaves every other
// name to the system. The operator's process gets it; a CLI's does not, so
// there the in-cluster names are unresolvable, as on a laptop.
import dns from 'node:dns';

const hosts = new Map(
  (process.env.JOBFLEET_GROUND_HOSTS ?? '')
    .split(',')
    .filter(Boolean)
    .map((entry) => entry.split('=')),
);
const systemLookup = dns.lookup;
// net (and so pg, amqplib and fetch) looks names up through dns.lookup
dns.lookup = function lookup(hostname, options, callback) {
  const address = hosts.get(hostname);
  if (!address) return systemLookup.call(this, hostname, options, callback);
  const cb = typeof options === 'function' ? options : callback;
  const opts = typeof options === 'object' && options !== null ? options : {};
  const family = address.includes(':') ? 6 : 4;
  process.nextTick(() => (opts.all ? cb(null, [{ address, family }]) : cb(null, address, family)));
};
