/** Kept in step with package.json and plugin.yaml (a test checks all three). */
export const VERSION = '0.4.0';
