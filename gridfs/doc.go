// Package gridfs stores and reads task output in Disbatch's own GridFS
// layout: a files collection (tasks.files) and a chunks collection
// (tasks.chunks) like standard GridFS, with these differences that
// Disbatch's tools rely on:
//
//   - a file is named "stdout" or "stderr" and carries metadata.task_id;
//   - chunk data is a BSON String, not BinData, and a chunk never ends in
//     the middle of a UTF-8 character (so chunks may be a few bytes shorter
//     than chunkSize, 261120);
//   - length counts bytes, and md5 is the hex MD5 of all of them.
//
// Output that is not text is never mangled into a string: a chunk whose
// bytes are not valid UTF-8, or hold a NUL (Text), is stored as BinData
// (subtype 0). The
// Reader accepts both kinds of chunk, so it also reads files written by
// standard GridFS (driver buckets) into the same collections.
//
// The Writer streams: it holds at most one chunk in memory, so output of any
// size can be stored as it is produced.
package gridfs
