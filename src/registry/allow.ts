/**
 * Which registries a lookup may reach, and at which addresses. The webhook
 * looks up images that any pod creator names: without a policy, a pod could
 * aim its connections at any host and port (an internal service, the cloud's
 * metadata address) and read the outcome back. So, when a door gives a
 * policy (the webhook always does; the CLI, run by its user on their own
 * charts, does not):
 *
 * - only registries the policy names are asked: `host`, `host:port`, or
 *   `*.domain` for every subdomain (by name, before any connection);
 * - a connection goes only to a public address, checked on the address it
 *   resolves to (so a name that resolves, or is rebound, to a private address
 *   is refused too), unless the registry is named exactly among `private`
 *   (an operator's in-cluster mirror). Private means loopback, RFC 1918,
 *   link-local (169.254.0.0/16, where clouds serve instance metadata),
 *   shared (100.64.0.0/10), unique-local and the other special ranges below.
 *
 * Through an HTTP proxy (HTTPS_PROXY), the proxy resolves the name: only the
 * name check applies, and the proxy's own rules.
 */
import { BlockList, isIP } from 'node:net';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions } from 'node:dns';

export interface RegistryPolicy {
  /** Registries that may be looked up: `host`, `host:port`, `*.domain`. */
  registries: readonly string[];
  /** Registries (named exactly) that may resolve to private addresses. */
  privateRegistries: readonly string[];
}

const normal = (host: string): string => host.trim().toLowerCase();

/** `host`, `host:port`: that registry exactly; `*.domain` (`*.domain:port`): its subdomains, on the default port (or that one). */
function matches(pattern: string, registry: string): boolean {
  const p = normal(pattern);
  const r = normal(registry);
  if (!p.startsWith('*.')) return p === r;
  const colon = p.lastIndexOf(':');
  const [suffix, port] = colon === -1 ? [p.slice(1), ''] : [p.slice(1, colon), p.slice(colon)];
  if (port !== '' ? !r.endsWith(port) : r.includes(':')) return false;
  const host = port === '' ? r : r.slice(0, -port.length);
  return host.endsWith(suffix) && host.length > suffix.length;
}

/** Whether `registry` (as an image reference names it: `docker.io`, `host:5000`) may be looked up; and whether it may resolve to a private address. */
export function registryAllowed(registry: string, policy: RegistryPolicy | undefined): { allowed: boolean; privateAddresses: boolean } {
  if (!policy) return { allowed: true, privateAddresses: true };
  const allowed = policy.registries.some((p) => matches(p, registry));
  return { allowed, privateAddresses: allowed && policy.privateRegistries.some((p) => normal(p) === normal(registry)) };
}

/** Address ranges no lookup reaches unless allowed: not the public internet. */
const SPECIAL = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // RFC 1918
  ['100.64.0.0', 10], // shared address space (carrier NAT; some clusters' pod ranges)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local: cloud instance metadata
  ['172.16.0.0', 12], // RFC 1918
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.168.0.0', 16], // RFC 1918
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) SPECIAL.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const) SPECIAL.addSubnet(net, bits, 'ipv6');

/** IPv4 written inside an IPv6 address (`::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`): the IPv4 address is where it goes. */
function embeddedIpv4(address: string): string | undefined {
  const m = /^(?:::ffff:|64:ff9b::)(?:0:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return m[1];
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (!hex) return undefined;
  const hi = parseInt(hex[1]!, 16);
  const lo = parseInt(hex[2]!, 16);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
}

/** True for an address on the public internet (not loopback, private, link-local or another special range). */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '');
  const family = isIP(bare);
  if (family === 0) return false;
  if (family === 6) {
    const v4 = embeddedIpv4(bare);
    if (v4) return isPublicAddress(v4);
    return !SPECIAL.check(bare, 'ipv6');
  }
  return !SPECIAL.check(bare, 'ipv4');
}

export class AddressRefused extends Error {}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/tls connect that resolves as usual and refuses
 * addresses that are not public: the check is on the address the socket
 * will connect to, not on the name.
 */
export function publicOnlyLookup(hostname: string, options: LookupOneOptions | LookupAllOptions, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
    if (error) return callback(error, '');
    const usable = addresses.filter((a) => isPublicAddress(a.address));
    if (usable.length === 0) return callback(new AddressRefused(`${hostname} resolves to no public address (private, loopback and link-local addresses are not looked up unless the registry is allowed to)`), '');
    if ((options as LookupAllOptions).all) return callback(null, usable);
    callback(null, usable[0]!.address, usable[0]!.family);
  });
}
