"""The ``blind9`` note and query templates of the ``conditions`` and ``films`` generators.

A ninth variant, written by a helper for one blind measurement, made at facts rules 12
(docs/evaluation.md); the conditions templates were read after it, the films templates not
yet. Chosen by ``templates="blind9"`` in :mod:`dpsynrag.eval.datasets_ordinary`,
which maps the variant name to these sets. Same placeholders and rules as the other variants
there (each note holds its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND9", "FILM_TEMPLATES_BLIND9"]

# Blind9: for one blind measurement only; whoever tunes the system must not read these.
CONDITION_TEMPLATES_BLIND9 = TemplateSet(notes=(
    "| pt | yrs | seen | by | c/o | what it is | given |\n"
    "|----|-----|------|----|-----|------------|-------|\n"
    "| {name} | {age} | {date} | Dr. {doctor} | {symptoms} | {condition} | {treatment} |",
    "Respected Sir/Madam, I am writing on behalf of my uncle {name} ({age} years). Since "
    "long time he is having {symptoms}. On {date} he was seen by Dr. {doctor}, who was "
    "telling it is {condition} and giving {treatment}. Kindly let me know if this medicine "
    "can be continued while travelling to home country. Thanking you in anticipation.",
    "TELEGRAM {date} TO FAMILY OF {name} STOP AGED {age} STOP PLAGUED BY {symptoms} STOP "
    "DR {doctor} NAMES IT {condition} STOP ON {treatment} STOP NO NEED TO VISIT STOP",
    "To the Jury Central Summoning Bureau\n\nRe: request for excusal - juror {name}, age "
    "{age}\n\nI write in support of my patient's request to be excused from service. I "
    "reviewed them on {date}. They have been troubled by {symptoms}, which I attribute to "
    "{condition}. They are presently on {treatment} and should not sit for long periods "
    "until this has settled.\n\nDr. {doctor}",
    "[00:00:04] AGENT: You're through to member claims, how can I help?\n[00:00:09] CALLER "
    "({name}, {age}): I saw Dr. {doctor} on {date} and need to claim for {treatment}.\n"
    "[00:00:21] AGENT: And what was it for?\n[00:00:24] CALLER: {condition}. I'd had "
    "{symptoms}.\n[00:00:33] AGENT: Thank you, I'll open that claim now.",
    "Shared family doc - Grandad's health, last edited {date}\n\u2022 who: {name}, {age}\n"
    "\u2022 GP: Dr. {doctor}\n\u2022 what we noticed: {symptoms}\n\u2022 what the GP "
    "thinks: {condition}\n\u2022 what he's taking: {treatment}\nTL;DR he's grumbling but fine",
    "(typed up from handwritten card, spelling as orignal) pateint: {name}  ag: {age}  "
    "date: {date}  complaning of {symptoms}. docter {doctor} sez its {condition}, gave "
    "{treatment}. to come bak if wors.",
    "Housing Options Team\nMedical evidence in support of the application of {name}, {age}\n"
    "Date of assessment: {date}\nI can confirm that my patient suffers from {condition}. "
    "Recent problems include {symptoms}. Current management is {treatment}. Ground-floor "
    "accommodation would help. Dr. {doctor}",
    "Recreational diving medical questionnaire - {name} (age {age}), {date}\n[x] I am "
    "currently under a doctor's care\n[ ] I have had surgery in the last year\nDetails: "
    "{condition}; symptoms were {symptoms}; treated with {treatment}.\nExamining physician: "
    "Dr. {doctor} - fit to dive after completion of treatment.",
    "record audit trail, patient {name} ({age})\n  {date}  Dr. {doctor}  problems += "
    "{condition}\n  {date}  Dr. {doctor}  history += {symptoms}\n  {date}  Dr. {doctor}  "
    "meds += {treatment}",
    "> On {date}, {name} wrote:\n> Any news from the doctor? You said you'd been getting "
    "{symptoms}.\n\nYes! Dr. {doctor} had a look. Apparently the culprit is {condition}, "
    "believe it or not. I'm on {treatment} for now. Not bad for {age}, eh?",
    "Camp Birchwater infirmary log\nCamper/staff: {name}, {age}\nIn: {date}\nSymptoms: "
    "{symptoms}\nCamp physician Dr. {doctor} suspects {condition}. Started {treatment}; "
    "back to cabin after dinner, counsellor informed.",
), queries=(
    "Please sir, what is the name of sickness when person is having {symptoms}? Kindly "
    "reply.",
    "URGENT QUERY STOP {symptoms} STOP WHAT AILMENT STOP",
    "| complaint | {symptoms} |\n| likely diagnosis | ? |",
    "whats wrong w me, ive had {symptoms} for ages now, pls halp",
    "> {asker} wrote: I've got {symptoms}\nCan anybody answer her? What is it called?",
    "Riddle from {asker}: I bring {symptoms}. What am I?",
    "{symptoms} cause adult",
    "Dad's carer ({asker}) has noticed {symptoms}. What should go down in his notes as the "
    "likely problem?",
    "My PCP is booked out for a month. Been having {symptoms}. What's the likely dx?",
    "Diving instructor here: a student mentions {symptoms}. What would a physician call it?",
))

FILM_TEMPLATES_BLIND9 = TemplateSet(notes=(
    "| viewer | watched on | picture | made by | kind | what happens | score |\n"
    "|--------|------------|---------|---------|------|--------------|-------|\n"
    "| {name} | {date} | {title} | {director} | {genre} | {plot} | {stars} |",
    "This movie {title} I watch on {date} with all my family. Is {genre} and the director "
    "is {director}. Story have {plot}. Very much I enjoy, I give {stars} star. Thanking "
    "you, {name}",
    "TELEGRAM {date} STOP {name} SAW {title} STOP {genre} BY {director} STOP FEATURES "
    "{plot} STOP RATES IT {stars} STOP",
    "[00:00:03] AGENT: Streaming support, how can I help?\n[00:00:08] CALLER ({name}): I was "
    "charged twice for {title} on {date}.\n[00:00:15] AGENT: The {genre} by {director}?\n"
    "[00:00:18] CALLER: That's it, the one with {plot}.\n[00:00:26] AGENT: I'll refund the "
    "duplicate rental.",
    "(typed up from the comments box, spelling as writen) name: {name}  date: {date}  film: "
    "{title}  realy good {genre}, loved {plot}. direcor {director}. {stars} outa 5",
    "Shared watch doc, updated {date} by {name}\n\u2022 pick: {title}\n\u2022 who made it: "
    "{director}\n\u2022 type: {genre}\n\u2022 expect: {plot}\n\u2022 house score: {stars}\n"
    "TL;DR worth a Sunday afternoon",
    "watchlist.diff ({date}, user {name})\n- {title}  [to watch]\n+ {title}  [watched, "
    "{stars}/5]\n  # {genre}, {director}; {plot}",
    "> On {date}, my sister asked:\n> what was that thing you made me sit through?\n\n"
    "{title}! {director}'s {genre}. You know, {plot}. You gave it {stars} and then cried. "
    "Love, {name}",
    "Post-screening audience survey ({date})\nRespondent: {name}\nFeature seen: {title}\n"
    "[x] I would recommend this {genre}\n[ ] I left early\nMost memorable: {plot}\n"
    "Director known to you? {director}\nOverall: {stars}",
    "Home contents claim, filed {date} by policyholder {name}. Television knocked off its "
    "stand by an over-excited guest during {title} (a {genre} directed by {director}; the "
    "scene involved {plot}). Claimant rates the film {stars}/5 regardless.",
    "Guestbook, Cabin 2 - {date}. Rainy weekend so we dug out the DVD box. Ended up with "
    "{title}, which had {plot}. Kids argued it's a {genre}; {director} fans, apparently. "
    "{stars} stars from us. The {name} household",
    "Hotel folio, guest {name}. {date} - in-room entertainment: {title} ({genre}, dir. "
    "{director}). Programme guide text: {plot}. Guest feedback card: {stars}.",
), queries=(
    "Please help, I am searching one movie, is {genre}, inside have {plot}. What is his "
    "name?",
    "NEED MOVIE NAME STOP {plot} STOP PROBABLY {genre} STOP",
    "| clue | {plot} |\n| kind | {genre} |\n| name of picture | ??? |",
    "wat was taht movie wiht {plot}?? cant rember",
    "> {asker} asked: which movie had {plot}?\nSeconding this, nobody here knows either.",
    "Riddle from {asker}: I'm a {genre}, and in me you'll find {plot}. What's my name?",
    "{genre} movie {plot} name",
    "Cabin guestbook mentions a DVD someone left behind: a {genre} with {plot}. Which one "
    "could it be?",
    "Anybody recall a flick, {genre} I think, where there's {plot}? Name escapes me.",
    "Insurance adjuster {asker} here: a claimant mentions a {genre} with {plot}. What was it "
    "called?",
))
