"""The ``unseen`` note and query templates of the ``conditions`` and ``films`` generators.

Written for one blind final measurement, made on 2026-11-28 (docs/evaluation.md: "A fifth
unread template set"); its corpora have been read since, so it no longer measures unseen
wording.
Chosen by ``templates="unseen"`` in :mod:`dpsynrag.eval.datasets_ordinary`, which maps the
variant name to these sets. Same placeholders and rules as the other variants
there (each note holds its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_UNSEEN", "FILM_TEMPLATES_UNSEEN"]

# Unseen: measured blind once (2026-11-28), read since.
CONDITION_TEMPLATES_UNSEEN = TemplateSet(notes=(
    "[video visit, {date}] Dr. {doctor}: What brings you in today? {name} ({age}): Honestly, "
    "{symptoms}. Dr. {doctor}: Right, that fits {condition}. I'll send {treatment} over to "
    "your chemist.",
    "School office, {date}. Teaching assistant {name}, {age}, popped in to see the school "
    "nurse about {symptoms}. Already under Dr. {doctor} - {condition}, on {treatment}. "
    "Sent home at lunch.",
    "DISPENSED {date} | {treatment} | for {name}, {age} | indication {condition} | "
    "prescriber Dr. {doctor} | pt mentions {symptoms} at the counter",
    "{date} / {name} / {age} / {condition} / {symptoms} / {treatment} / Dr. {doctor}",
    "Extenuating circumstances form, {date}. Student {name} (aged {age}) missed two exams "
    "owing to {symptoms}. Dr. {doctor} attests to {condition}; the student is currently "
    "taking {treatment}.",
    "Rugby club medical log, {date}: {name}, {age}, sat out training with {symptoms}. Club "
    "medic Dr. {doctor} reckons it's {condition} and has them on {treatment} for now.",
    "Hospital at home team, day 3 of 5, {date}. {name}, {age}. Background: {condition}, for "
    "which Dr. {doctor} started {treatment}. Today still some {symptoms}, but eating and "
    "mobilising well.",
    "Interpreter-assisted appointment on {date}. Through the interpreter {name} ({age}) "
    "relayed {symptoms}. Dr. {doctor} explained to the family that this was {condition} and "
    "wrote up {treatment}.",
    "My diary, {date}. Finally got in to see Dr. {doctor} about the {symptoms}. Turns out "
    "it's {condition}! Picked up {treatment} on the way home. ({name}, {age})",
    "Donor session {date}: {name}, {age}, turned away today. Currently on {treatment} from "
    "Dr. {doctor} for {condition}, after weeks of {symptoms}. Rebook in three months.",
    "Trial screening log, {date}. Candidate {name}, age {age}: excluded, active {condition} "
    "(Dr. {doctor}, on {treatment}). Screening history: {symptoms}.",
    "Message to the practice of Dr. {doctor}, {date}, from {name} ({age}): still getting "
    "{symptoms} despite the {treatment}. is {condition} meant to drag on this long?",
), queries=(
    "Video visit intake, reason for booking: {symptoms}. Patient asks what diagnosis to "
    "expect.",
    "{asker} via text: ok so {symptoms}. what is this??",
    "Asking for my teenage son: {symptoms}. What would you guess he's come down with?",
    "Night-shift worker, mid-forties. For a while I've noticed {symptoms}. Could someone put "
    "a name to it?",
    "Question passed on by {asker}, a teaching assistant: a colleague reports {symptoms}. "
    "Likely explanation?",
    "Pharmacy counter, customer {asker} lists {symptoms} and wants to know which complaint "
    "that adds up to.",
    "Complaints, roughly in order of annoyance: {symptoms}. Diagnose me, internet.",
    "My mum ({asker}) won't see anyone about {symptoms}. If you had to name her illness, "
    "what would it be?",
    "Rural clinic, no doctor until Monday. Adult with {symptoms} - what are we most likely "
    "dealing with?",
))

FILM_TEMPLATES_UNSEEN = TemplateSet(notes=(
    "{name} rated {title} {stars}/5 on {date} - {director} really said: {plot}, make it a "
    "{genre}. and somehow it works??",
    "Re: underrated {genre} picks (posted {date} by {name}). Nobody ever mentions {title}. "
    "You get {plot}, with {director} at their best. {stars}/5 from me.",
    "Projection booth notes, {date}: {name} on reel changes for {title}. Audience warm to "
    "this {genre}, especially to {plot}. Print borrowed through {director}'s distributor.",
    "{date} 23:14 {name}: just got out of {title}. {plot}. {director} u genius. {stars}/5",
    "Radio phone-in, {date}: caller {name} rang the film hour to defend {title}, {director}'s "
    "much-mocked {genre}. The bit with {plot} 'is the whole point', they said. Host gave it "
    "{stars}.",
    "{title} | {genre} | dir {director} | {stars}* | {name} | {date} | tags: {plot}",
    "It took me until {date} to get round to {title}, and I regret waiting. On paper {plot} "
    "sounds like too much for one {genre}, but {director} keeps every thread taut. I'm "
    "{name}, and I'd give it {stars} stars without hesitating.",
    "Overheard at a bus stop, {date}: {name} explaining {title} to a stranger, something "
    "about {plot}. Apparently a {genre}. Apparently {director}. Apparently {stars} stars.",
    "Subtitling job closed {date}. Translator: {name}. Work: {title} ({genre}; {director}). "
    "Hard scenes: {plot}. Translator's opinion of it: {stars}.",
    "House rule: whoever loses at cards picks. On {date} {name} lost and chose {title}, a "
    "{genre} by {director} built on {plot}. Household verdict: {stars}.",
    "Director {director}. Genre {genre}. Story: {plot}. Logged by {name} on {date}, {stars} "
    "stars. Film: {title}.",
    "Accessibility feedback from {name}, {date}: captions on {title} kept dropping during "
    "{plot}; otherwise a fine {genre} from {director}.",
), queries=(
    "{asker} on a film forum: a {genre}, I think, with {plot}. Does anyone recognise it?",
    "text from my brother: 'what was that movie w/ {plot}'. I have no idea, do you?",
    "Podcast listener mail from {asker}: we argued for a whole episode about a {genre} "
    "featuring {plot} and nobody could name it. Can you?",
    "Cinema club vote needs a title. Description we have: {plot}. Which picture matches?",
    "Lost my watchlist. One entry was a {genre} with {plot} - what's it called again?",
    "Looking for a {genre}: {plot}. Not a remake, an original. Name?",
    "Review snippet with its heading torn off: '... {plot} ...'. Which film was being "
    "reviewed?",
    "Kid asked me (I'm {asker}) about a story on telly with {plot}. Any idea which one?",
    "Which feature combines {plot} in a single story?",
))
