/** `*` matches any run of characters; everything else is literal. */
export function globMatches(pattern: string, text: string): boolean {
  const source = pattern.split('*').map((part) => part.replace(/[\\^$.|?+()[\]{}]/g, '\\$&')).join('.*');
  return new RegExp(`^${source}$`).test(text);
}
